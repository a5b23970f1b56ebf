#!/usr/bin/env node
// An example terraform-provider-denobridge provider in JavaScript: the same behaviour as the
// Rust `examples/denobridge` (so it replays `tests/transcripts/denobridge/`).
//
// `plugin.js STATE_DIR` is a RESOURCE provider keeping each resource as the JSON file
// `STATE_DIR/<id>.json` (`{"props": .., "state": {"version": n}}`), ids `r1`, `r2`, … from a
// counter in `STATE_DIR/next-id`. A `create` whose props hold `"defer": true` is answered
// right after the next request's answer. `plugin.js STATE_DIR action` is an ACTION provider:
// `invoke` sends `step 1 of 2`, `step 2 of 2`, then answers `{"done": true}`.
//
// Build: node guest-sdk/js/build.js examples/js/denobridge/plugin.js -o denobridge.wasm
// Run:   mkdir -p /tmp/state && printf '%s\n' '{"jsonrpc":"2.0","id":0,"method":"health"}' '{"jsonrpc":"2.0","id":1,"method":"create","params":{"props":{"name":"a"}}}' | sandpipe run --framing lines --dir /tmp/state::/state denobridge.wasm /state
// Node:  the same input | node examples/js/denobridge/plugin.js /tmp/state

import { denobridge, host, json, jsonrpc, main } from "../../../guest-sdk/js/src/index.js";

const { RpcError } = jsonrpc;

/** A bare `-32603`, the detail only on stderr (what a failing Deno method does). */
function fail(/** @type {string} */ what, /** @type {unknown} */ e) {
  host.writeStderr(`example-denobridge: ${what}: ${e instanceof Error ? e.message : e}\n`);
  return denobridge.internalError();
}

/** Deep equality of two JSON values (object member order aside, as serde_json compares). */
function same(/** @type {any} */ a, /** @type {any} */ b) {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a);
  if (ka.length !== Object.keys(b).length) return false;
  return ka.every((k) => Object.hasOwn(b, k) && same(a[k], b[k]));
}

class FileStore extends denobridge.ResourceProvider {
  /** @param {string} dir */
  constructor(dir) {
    super();
    this.dir = dir;
  }

  /** @param {string} id */
  path(id) {
    if (!/^r[0-9]+$/.test(id)) {
      throw denobridge.invalidParams(`resource id ${JSON.stringify(id)} is not r<number>`);
    }
    return `${this.dir}/${id}.json`;
  }

  /** The stored record, null if the resource does not exist. @param {string} id */
  load(id) {
    const path = this.path(id);
    let bytes;
    try {
      bytes = host.fs.readFile(path);
      return bytes === null ? null : json.parse(bytes);
    } catch (e) {
      throw fail(id, e);
    }
  }

  /** @param {string} id @param {unknown} props @param {number} version */
  store(id, props, version) {
    const path = this.path(id);
    const state = { version };
    try {
      host.fs.writeFile(path, json.stringify({ props, state }));
    } catch (e) {
      throw fail(id, e);
    }
    return state;
  }

  create({ props }) {
    if (typeof props?.name !== "string") throw new RpcError(-32000, "props.name must be a string");
    const counter = `${this.dir}/next-id`;
    let n;
    try {
      const text = host.fs.readFile(counter);
      n = text === null ? 1 : Number(new TextDecoder().decode(text).trim());
      if (!Number.isSafeInteger(n) || n < 0) throw new Error(`next-id holds ${n}`);
      host.fs.writeFile(counter, String(n + 1));
    } catch (e) {
      throw fail("next-id", e);
    }
    const id = `r${n}`;
    return { id, state: this.store(id, props, 1) };
  }

  read({ id }) {
    const record = this.load(id);
    if (record === null) return denobridge.GONE;
    return { props: record.props ?? null, state: record.state ?? null };
  }

  update({ id, nextProps }) {
    const record = this.load(id);
    if (record === null) throw fail(id, "update of a resource that does not exist");
    const v = record.state?.version;
    const version = (Number.isSafeInteger(v) && v >= 0 ? v : 0) + 1;
    return { state: this.store(id, nextProps, version) };
  }

  delete({ id }) {
    const path = this.path(id);
    try {
      host.fs.removeFile(path);
    } catch (e) {
      throw fail(id, e);
    }
    return { done: true };
  }

  modifyPlan({ planType, nextProps, currentProps }) {
    const current = currentProps ?? null;
    if (planType === "update" && !same(nextProps?.name, current?.name)) {
      return { requiresReplacement: true };
    }
    if (planType === "update" && !same(nextProps, current)) {
      return {
        modifiedProps: nextProps,
        diagnostics: [denobridge.diagnostic("warning", "updated in place", "name is unchanged")],
      };
    }
    return { noChanges: true };
  }

  answerAfterNext(method, params) {
    return method === "create" && params.props?.defer === true;
  }
}

class TwoSteps extends denobridge.ActionProvider {
  invoke(_params, progress) {
    for (let step = 1; step <= 2; step++) progress(`step ${step} of 2`);
    return { done: true };
  }
}

main((args) => {
  if (args.length === 1) return denobridge.serve(new FileStore(args[0]));
  if (args.length === 2 && args[1] === "action") return denobridge.serve(new TwoSteps());
  throw new Error("usage: example-denobridge STATE_DIR [action]");
});
