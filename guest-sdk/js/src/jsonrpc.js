// JSON-RPC 2.0 messages as the Rust side encodes them: members in the order
// `jsonrpc, id, result|error` and `jsonrpc, method, params`; error objects
// `code, message[, data]`.

import { stringify } from "./json.js";

export const PARSE_ERROR = -32700;
export const INVALID_REQUEST = -32600;
export const METHOD_NOT_FOUND = -32601;
export const INVALID_PARAMS = -32602;
export const INTERNAL_ERROR = -32603;

/** An error answer: throw it from a handler (or return it) to answer with it. */
export class RpcError extends Error {
  /** @param {number | string} code @param {string} message @param {unknown} [data] */
  constructor(code, message, data) {
    super(message);
    this.name = "RpcError";
    this.code = code;
    this.data = data;
  }

  toJSON() {
    return this.data === undefined
      ? { code: this.code, message: this.message }
      : { code: this.code, message: this.message, data: this.data };
  }
}

/** @param {unknown} id @param {unknown} result */
export function response(id, result) {
  return stringify({ jsonrpc: "2.0", id, result });
}

/** @param {unknown} id @param {RpcError} error */
export function errorResponse(id, error) {
  return stringify({ jsonrpc: "2.0", id, error: error.toJSON() });
}

/** @param {string} method @param {unknown} [params] */
export function notification(method, params) {
  return stringify(params === undefined ? { jsonrpc: "2.0", method } : { jsonrpc: "2.0", method, params });
}

/** A valid JSON-RPC id: a string, an integer or null. @param {unknown} id */
export function isId(id) {
  return id === null || typeof id === "string" || typeof id === "bigint" || Number.isInteger(id);
}
