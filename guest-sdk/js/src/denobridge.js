// Write a terraform-provider-denobridge provider: extend one of the four provider classes,
// call `serve`.
//
//   stdin ──JSON Lines──► serve ──► health, shutdown, unknown methods: answered here
//                           │  └──► create / read / update / delete / modifyPlan (resource),
//                           │       read (data source), open / renew / close (ephemeral),
//                           │       invoke (action, with progress notifications)
//   stdout ◄── one line per answer, in the order answers are ready
//
// A handler returns the result object (or a promise-free value) or throws an `RpcError`;
// any other exception is answered with a bare `-32603 Internal error`, its message on stderr
// (what a failing Deno method does). `answerAfterNext(method, params)` may hold an answer
// back until the next request has been answered, which shows a host coping with answers out
// of order. `shutdown` (a notification, as the Go host sends it, or a request, answered `{}`)
// ends the loop after the held answers are sent; so does the end of stdin.

import * as host from "./host.js";
import { parse } from "./json.js";
import {
  INTERNAL_ERROR,
  INVALID_PARAMS,
  INVALID_REQUEST,
  METHOD_NOT_FOUND,
  PARSE_ERROR,
  RpcError,
  errorResponse,
  isId,
  notification,
  response,
} from "./jsonrpc.js";
import { stdio } from "./stdio.js";

/** `-32601 Method not found`. */
export function methodNotFound() {
  return new RpcError(METHOD_NOT_FOUND, "Method not found");
}

/** A bare `-32603 Internal error`. */
export function internalError() {
  return new RpcError(INTERNAL_ERROR, "Internal error");
}

/** `-32602 Invalid params`, the reason in `data`. @param {string} reason */
export function invalidParams(reason) {
  return new RpcError(INVALID_PARAMS, "Invalid params", reason);
}

/** A warning or error shown to the Terraform user. */
export function diagnostic(/** @type {"warning" | "error"} */ severity, /** @type {string} */ summary, /** @type {string} */ detail) {
  return { severity, summary, detail };
}

/** What `read` answers for a resource that no longer exists. */
export const GONE = Object.freeze({ exists: false });

/** Base of the four provider kinds: which methods it serves. */
class Provider {
  /** @returns {string[]} */
  methods() {
    return [];
  }
  /**
   * Hold the answer to this request until the next request has been answered.
   * @param {string} method @param {any} params
   */
  answerAfterNext(method, params) {
    void method, params;
    return false;
  }
}

/** A resource: `create`, `read`, `update`, `delete`, optionally `modifyPlan`. */
export class ResourceProvider extends Provider {
  methods() {
    return ["create", "read", "update", "delete", "modifyPlan"];
  }
  /** @param {{props: any}} params @returns {{id: string, state: any, sensitiveState?: any, diagnostics?: any[]}} */
  create(params) {
    throw methodNotFound();
  }
  /** @param {{id: string, props: any}} params @returns {{props: any, state: any} | typeof GONE} */
  read(params) {
    throw methodNotFound();
  }
  /** @param {{id: string, nextProps: any, currentProps: any, currentState: any}} params @returns {{state: any}} */
  update(params) {
    throw methodNotFound();
  }
  /** @param {{id: string, props: any, state: any}} params @returns {{done: true}} */
  delete(params) {
    throw methodNotFound();
  }
  /**
   * `{noChanges: true}`, `{requiresReplacement: true}` or `{modifiedProps, diagnostics?}`.
   * @param {{id?: string, planType: string, nextProps: any, currentProps?: any, currentState?: any}} params
   * @returns {object}
   */
  modifyPlan(params) {
    throw methodNotFound();
  }
}

/** A data source: `read` → `{result}`. */
export class DataSourceProvider extends Provider {
  methods() {
    return ["read"];
  }
  /** @param {{props: any}} params @returns {{result: any}} */
  read(params) {
    throw methodNotFound();
  }
}

/** An ephemeral resource: `open`, optionally `renew` and `close`. */
export class EphemeralProvider extends Provider {
  methods() {
    return ["open", "renew", "close"];
  }
  /** @param {{props: any}} params @returns {{result: any}} */
  open(params) {
    throw methodNotFound();
  }
  /** @param {{privateData: any}} params @returns {object} */
  renew(params) {
    throw methodNotFound();
  }
  /** @param {{privateData: any}} params @returns {{done: true}} */
  close(params) {
    throw methodNotFound();
  }
}

/** An action: `invoke(params, progress)`; `progress(message)` sends `invokeProgress`. */
export class ActionProvider extends Provider {
  methods() {
    return ["invoke"];
  }
  /** @param {{props: any}} params @param {(message: string) => void} progress @returns {{done: true}} */
  invoke(params, progress) {
    throw methodNotFound();
  }
}

/** The params' shape a method needs, or why not. @param {string} method @param {unknown} params */
function checkParams(method, params) {
  if (params === undefined || params === null) params = {};
  if (typeof params !== "object" || Array.isArray(params)) return `invalid type: expected ${method} params to be an object`;
  const p = /** @type {Record<string, unknown>} */ (params);
  const needsId = method === "update" || method === "delete";
  if (needsId && typeof p.id !== "string") return "missing field `id`";
  if (method === "modifyPlan" && !["create", "update", "delete"].includes(/** @type {string} */ (p.planType))) {
    return "planType must be create, update or delete";
  }
  return null;
}

/**
 * Serve `provider` until `shutdown` or the end of stdin.
 * @param {ResourceProvider | DataSourceProvider | EphemeralProvider | ActionProvider} provider
 * @param {import("./stdio.js").Framed} [io]
 */
export function serve(provider, io = stdio("lines")) {
  const methods = provider.methods();
  /** @type {string[]} */
  let held = [];
  const release = () => {
    for (const frame of held) io.send(frame);
    held = [];
  };
  for (;;) {
    const frame = io.recv();
    if (frame === null) break;
    let msg;
    try {
      msg = parse(frame);
    } catch (e) {
      host.writeStderr(`denobridge: ${/** @type {Error} */ (e).message}\n`);
      io.send(errorResponse(null, new RpcError(PARSE_ERROR, "Parse error")));
      continue;
    }
    if (msg === null || typeof msg !== "object" || Array.isArray(msg)) {
      io.send(errorResponse(null, new RpcError(INVALID_REQUEST, "Invalid Request")));
      continue;
    }
    const m = /** @type {Record<string, any>} */ (msg);
    if (typeof m.method !== "string") continue; // a response: this side sends no requests
    const isRequest = "id" in m;
    if (isRequest && !isId(m.id)) {
      io.send(errorResponse(null, new RpcError(INVALID_REQUEST, "Invalid Request")));
      continue;
    }
    if (m.method === "shutdown") {
      if (isRequest) io.send(response(m.id, {}));
      break;
    }
    if (!isRequest) continue; // unknown notifications are ignored
    // Answered by the loop itself, releasing nothing held.
    if (m.method === "health") {
      io.send(response(m.id, { ok: true }));
      continue;
    }
    if (!methods.includes(m.method)) {
      io.send(errorResponse(m.id, methodNotFound()));
      continue;
    }
    const bad = checkParams(m.method, m.params);
    if (bad !== null) {
      io.send(errorResponse(m.id, invalidParams(bad)));
      continue;
    }
    // A request for the provider: answered now (then the held answers go), or held.
    const params = m.params ?? {};
    const later = provider.answerAfterNext(m.method, params);
    const answer = call(io, provider, m.method, params, m.id);
    if (later) {
      held.push(answer);
    } else {
      io.send(answer);
      release();
    }
  }
  release();
}

/**
 * @param {import("./stdio.js").Framed} io @param {any} provider @param {string} method
 * @param {any} params @param {unknown} id
 */
function call(io, provider, method, params, id) {
  try {
    const result =
      method === "invoke"
        ? provider.invoke(params, (/** @type {string} */ message) => io.send(notification("invokeProgress", { message })))
        : provider[method](params);
    return response(id, result);
  } catch (e) {
    if (e instanceof RpcError) return errorResponse(id, e);
    host.writeStderr(`denobridge: ${method}: ${host.describe(e)}\n`);
    return errorResponse(id, internalError());
  }
}
