#!/usr/bin/env node
// An example Orchard provider in JavaScript: the same actions and answers as the Rust
// `examples/orchard` (so it replays `tests/transcripts/orchard/`).
//
// - `echo`: the outputs are the attrs, unchanged.
// - `sum`: `{"values": [numbers]}` → `{"sum": n}` (an integer when every value is one, with
//   64-bit overflow reported as `execute_failed`); a missing list or a non-number is
//   `validation_failed`.
// `configure` refuses `{"fail": true}`. An execute whose attrs hold `"defer": true` is answered
// only after the next request has been answered (answers out of order).
//
// Build: node guest-sdk/js/build.js examples/js/orchard/plugin.js -o orchard.wasm
// Run:   sandpipe call --protocol orchard --method execute --params '{"action":"sum","attrs":{"values":[1,2]}}' orchard.wasm
// Plan:  sandpipe run orchard.wasm schema        (natively: node examples/js/orchard/plugin.js schema)

import { json, main, orchard } from "../../../guest-sdk/js/src/index.js";

const { ActionSchema, AttributeSchema, ProviderError, ProviderSchema } = orchard;

const I64_MIN = -(2n ** 63n);
const I64_MAX = 2n ** 63n - 1n;

class Example extends orchard.Provider {
  schema() {
    const defer = () => new AttributeSchema("bool");
    return new ProviderSchema("example-orchard")
      .withAction("echo", new ActionSchema("return the attrs as outputs").withAttribute("defer", defer()))
      .withAction(
        "sum",
        new ActionSchema("add up a list of numbers")
          .withAttribute("values", new AttributeSchema("list(number)", true))
          .withAttribute("defer", defer()),
      );
  }

  configure(config) {
    if (config?.fail === true) {
      throw ProviderError.configureFailed("configuration rejected").withDetail("config.fail is true");
    }
  }

  execute(action, attrs) {
    return action === "sum" ? sum(attrs) : attrs;
  }

  defer(_action, attrs) {
    return attrs?.defer === true;
  }
}

/** @param {any} attrs */
function sum(attrs) {
  const values = attrs?.values;
  if (!Array.isArray(values)) throw ProviderError.validationFailed("values must be a list of numbers");
  /** @type {bigint | null} the sum while every value is an integer */
  let int = 0n;
  let float = 0;
  values.forEach((v, i) => {
    const integral = typeof v === "bigint" || Number.isInteger(v);
    if (typeof v !== "number" && typeof v !== "bigint") {
      throw ProviderError.validationFailed(`values[${i}] is not a number`).withDetail(`got ${json.stringify(v)}`);
    }
    float += Number(v);
    if (int !== null && integral && BigInt(v) >= I64_MIN && BigInt(v) <= I64_MAX) {
      int += BigInt(v);
      if (int < I64_MIN || int > I64_MAX) throw ProviderError.executeFailed("integer overflow");
    } else {
      int = null;
    }
  });
  return { sum: int === null ? json.float(float) : Number.isSafeInteger(Number(int)) ? Number(int) : int };
}

main((args) => orchard.run(new Example(), args));
