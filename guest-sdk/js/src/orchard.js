// Write an Orchard provider: extend `Provider`, call `run(provider, args)`.
//
//   args[0] == "schema" ──► the schema as one JSON line on stdout (plan mode), return
//   otherwise: stdin ──JSON Lines──► describe / configure / execute / shutdown ──► stdout
//
// The loop answers `describe` from `schema()` (asked once), answers an `execute` of an action
// missing from the schema with `unknown_action` without calling the provider, and answers
// malformed requests (`invalid_request`) and unknown methods (`unknown_method`) itself. A
// handler throws a `ProviderError` to answer with an error; any other exception is answered
// `internal_error` (the message also on stderr).
//
// Deferred answers: `defer(action, attrs)` may hold an execute back; it runs, and is
// answered, right after the next request answered normally (held executes run in arrival
// order). Held executes also run before `shutdown` is answered and when stdin closes.

import * as host from "./host.js";
import { parse, stringify } from "./json.js";
import { FrameError } from "./framing.js";
import { stdio } from "./stdio.js";

/** The protocol version every schema declares. */
export const PROTOCOL_VERSION = "1";
/** The plan-mode subcommand. */
export const SCHEMA_SUBCOMMAND = "schema";

/** The well-known error codes. */
export const codes = Object.freeze({
  INVALID_REQUEST: "invalid_request",
  UNKNOWN_METHOD: "unknown_method",
  UNKNOWN_ACTION: "unknown_action",
  VALIDATION_FAILED: "validation_failed",
  CONFIGURE_FAILED: "configure_failed",
  EXECUTE_FAILED: "execute_failed",
  INTERNAL_ERROR: "internal_error",
});

/** An Orchard error answer `{code, message, detail?}`. */
export class ProviderError extends Error {
  /** @param {string} code @param {string} message @param {string} [detail] */
  constructor(code, message, detail) {
    super(message);
    this.name = "ProviderError";
    this.code = code;
    this.detail = detail;
  }
  /** @param {string} detail */
  withDetail(detail) {
    this.detail = detail;
    return this;
  }
  toJSON() {
    return this.detail === undefined ? { code: this.code, message: this.message } : { code: this.code, message: this.message, detail: this.detail };
  }
  /** @param {string} message */
  static validationFailed(message) {
    return new ProviderError(codes.VALIDATION_FAILED, message);
  }
  /** @param {string} message */
  static configureFailed(message) {
    return new ProviderError(codes.CONFIGURE_FAILED, message);
  }
  /** @param {string} message */
  static executeFailed(message) {
    return new ProviderError(codes.EXECUTE_FAILED, message);
  }
}

/** @param {Record<string, any>} map */
function sorted(map) {
  return Object.fromEntries(Object.entries(map).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

/** An attribute of an action: its type (`"string"`, `"list(number)"`, …). */
export class AttributeSchema {
  /** @param {string} type @param {boolean} [required] @param {string} [description] */
  constructor(type, required = false, description) {
    this.type = type;
    this.required = required;
    this.description = description;
  }
  toJSON() {
    return { type: this.type, required: this.required || undefined, description: this.description };
  }
}

/** An action: a description and its attributes. */
export class ActionSchema {
  /** @param {string} [description] */
  constructor(description) {
    this.description = description;
    /** @type {Record<string, AttributeSchema>} */
    this.attributes = {};
  }
  /** @param {string} name @param {AttributeSchema} attribute */
  withAttribute(name, attribute) {
    this.attributes[name] = attribute;
    return this;
  }
  toJSON() {
    const attributes = Object.keys(this.attributes).length ? sorted(this.attributes) : undefined;
    return { description: this.description, attributes };
  }
}

/** What a provider declares: the answer to `describe` and the output of `schema`. */
export class ProviderSchema {
  /** @param {string} name */
  constructor(name) {
    this.name = name;
    this.protocol = PROTOCOL_VERSION;
    /** @type {Record<string, ActionSchema>} */
    this.actions = {};
  }
  /** @param {string} name @param {ActionSchema} action */
  withAction(name, action) {
    this.actions[name] = action;
    return this;
  }
  toJSON() {
    return { name: this.name, protocol: this.protocol, actions: sorted(this.actions) };
  }
}

/** An Orchard provider. */
export class Provider {
  /** What the provider offers; asked once per run. @returns {ProviderSchema} */
  schema() {
    throw new Error("a provider must define schema()");
  }
  /** Accept the config, or throw `ProviderError.configureFailed(..)`. @param {any} config */
  configure(config) {
    void config;
  }
  /**
   * Run `action` (always one of the schema's) with `attrs`; return the outputs.
   * @param {string} action @param {any} attrs @returns {any}
   */
  execute(action, attrs) {
    void action;
    return attrs;
  }
  /** Hold this execute back until the next request has been answered. @param {string} action @param {any} attrs */
  defer(action, attrs) {
    void action, attrs;
    return false;
  }
}

/** @param {unknown} id @param {unknown} result */
function ok(id, result) {
  return stringify({ id, result });
}

/** @param {unknown} id @param {ProviderError} error */
function err(id, error) {
  return stringify({ id, error: error.toJSON() });
}

/**
 * The whole provider: `args[0] == "schema"` prints the schema (plan mode), anything else
 * serves the RPC loop.
 * @param {Provider} provider @param {string[]} args @param {import("./stdio.js").Framed} [io]
 */
export function run(provider, args, io) {
  if (args[0] === SCHEMA_SUBCOMMAND) {
    host.write(new TextEncoder().encode(stringify(provider.schema()) + "\n"));
    return;
  }
  serve(provider, io ?? stdio("lines"));
}

/**
 * Answer requests until `shutdown` has been answered or stdin closes.
 * @param {Provider} provider @param {import("./stdio.js").Framed} io
 */
export function serve(provider, io) {
  const schema = provider.schema();
  /** @type {Array<[unknown, string, any]>} */
  let held = [];
  let shutDown = false;
  const execute = (/** @type {unknown} */ id, /** @type {string} */ action, /** @type {any} */ attrs) =>
    guarded(id, "execute", () => ({ outputs: provider.execute(action, attrs) }));
  const runHeld = () => {
    const now = held;
    held = [];
    for (const [id, action, attrs] of now) io.send(execute(id, action, attrs));
  };
  for (;;) {
    let frame;
    try {
      frame = io.recv();
    } catch (e) {
      if (!(e instanceof FrameError)) throw e;
      // The framer cannot resynchronise: say why, then stop.
      io.send(err(null, new ProviderError(codes.INVALID_REQUEST, `invalid request: ${e.message}`)));
      throw e;
    }
    if (frame === null) break;
    const answer = handle(frame);
    if (answer === null) continue;
    io.send(answer);
    if (shutDown) return;
    if (held.length) runHeld();
  }
  runHeld();

  /** The answer to one frame, or null when it is held. @param {Uint8Array} frame @returns {string | null} */
  function handle(frame) {
    let msg;
    try {
      msg = parse(frame);
    } catch (e) {
      host.writeStderr(`orchard provider: ${/** @type {Error} */ (e).message}\n`);
      return err(null, new ProviderError(codes.INVALID_REQUEST, "invalid request: not JSON"));
    }
    if (msg === null || typeof msg !== "object" || Array.isArray(msg)) {
      return err(null, new ProviderError(codes.INVALID_REQUEST, "invalid request: not an object"));
    }
    const m = /** @type {Record<string, any>} */ (msg);
    const id = "id" in m ? m.id : null;
    if (typeof m.method !== "string") {
      return err(id, new ProviderError(codes.INVALID_REQUEST, "invalid request: method is not a string"));
    }
    const method = m.method;
    if (shutDown) return err(id, new ProviderError(codes.INVALID_REQUEST, `${method} after shutdown`));
    if (!["describe", "configure", "execute", "shutdown"].includes(method)) {
      return err(id, new ProviderError(codes.UNKNOWN_METHOD, `unknown method: ${method}`));
    }
    let params = m.params;
    if (params === undefined || params === null) params = {};
    if (typeof params !== "object" || Array.isArray(params)) {
      return err(id, new ProviderError(codes.INVALID_REQUEST, `${method} params must be an object`));
    }
    switch (method) {
      case "describe":
        return ok(id, { schema });
      case "configure":
        return guarded(id, "configure", () => {
          provider.configure(params.config ?? {});
          return {};
        });
      case "execute": {
        const action = params.action;
        if (typeof action !== "string") {
          return err(id, new ProviderError(codes.INVALID_REQUEST, "execute needs a string action"));
        }
        const attrs = params.attrs ?? {};
        if (!Object.hasOwn(schema.actions, action)) {
          return err(id, new ProviderError(codes.UNKNOWN_ACTION, `unknown action: ${action}`));
        }
        if (provider.defer(action, attrs)) {
          held.push([id, action, attrs]);
          return null;
        }
        return execute(id, action, attrs);
      }
      default: // shutdown
        runHeld();
        shutDown = true;
        return ok(id, {});
    }
  }
}

/** `{id, result: f()}`, or the error it threw. @param {unknown} id @param {string} what @param {() => unknown} f */
function guarded(id, what, f) {
  try {
    return ok(id, f());
  } catch (e) {
    if (e instanceof ProviderError) return err(id, e);
    host.writeStderr(`orchard provider: ${what}: ${host.describe(e)}\n`);
    return err(id, new ProviderError(codes.INTERNAL_ERROR, `${what} failed`));
  }
}
