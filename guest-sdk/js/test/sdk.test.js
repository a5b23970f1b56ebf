// Unit tests of the SDK under node: `node --test test/` (run by tests/tests/js.rs).

import assert from "node:assert/strict";
import { test } from "node:test";

import { Framed } from "../src/stdio.js";
import { ContentLength, FrameError, JsonLines } from "../src/framing.js";
import * as json from "../src/json.js";
import * as denobridge from "../src/denobridge.js";
import * as orchard from "../src/orchard.js";

const enc = new TextEncoder();
const dec = new TextDecoder();

/** A Framed over `input`, fed `step` bytes per read, collecting what is sent. */
function memory(/** @type {string} */ input, framing = "lines", step = 3) {
  const bytes = enc.encode(input);
  let at = 0;
  /** @type {string[]} */
  const sent = [];
  const io = new Framed(framing, {
    read: () => bytes.subarray(at, (at = Math.min(bytes.length, at + step))),
    write: (b) => void sent.push(dec.decode(b)),
  });
  return { io, sent };
}

test("json keeps 64-bit integers and member order", () => {
  const v = json.parse('{"b":9223372036854775807,"a":[1,-2.5,1e300,"\\u00e9"],"c":null}');
  assert.equal(v.b, 9223372036854775807n);
  assert.deepEqual(Object.keys(v), ["b", "a", "c"]);
  assert.equal(json.stringify(v), '{"b":9223372036854775807,"a":[1,-2.5,1e300,"é"],"c":null}');
});

test("json prints floats the way Rust prints an f64", () => {
  const cases = [
    [6.5, "6.5"],
    [0.1, "0.1"],
    [1e-7, "1e-7"],
    [1.5e16, "15000000000000000"],
    [1e21, "1e21"],
    [-2.5e-300, "-2.5e-300"],
  ];
  for (const [n, text] of cases) assert.equal(json.stringify(n), text, String(n));
  assert.equal(json.stringify(json.float(3)), "3.0");
  assert.equal(json.stringify(json.float(1e16)), "1e16");
});

test("json refuses what is not JSON", () => {
  for (const bad of ["", "{", "[1,]", "01", '"\\x"', "1 2", "nul", '{"a" 1}']) {
    assert.throws(() => json.parse(bad), json.JsonError, bad);
  }
  assert.throws(() => json.parse("[".repeat(json.MAX_DEPTH + 2)), /nesting/);
});

test("json lines reassembles frames from any split and skips blank lines", () => {
  const { io } = memory('{"a":1}\r\n\n  \n[2]\n', "lines", 1);
  assert.equal(dec.decode(io.recv()), '{"a":1}');
  assert.equal(dec.decode(io.recv()), "[2]");
  assert.equal(io.recv(), null);
});

test("json lines rejects a line that is not JSON, and a frame over the limit", () => {
  const f = new JsonLines(8);
  f.feed(enc.encode("nope\n"));
  assert.throws(() => f.nextFrame(), FrameError);
  const g = new JsonLines(8);
  g.feed(enc.encode('"0123456789"'));
  assert.throws(() => g.nextFrame(), (e) => e instanceof FrameError && e.limit === 8);
});

test("content-length frames round-trip", () => {
  const f = new ContentLength();
  const wire = [...f.encode('{"x":1}'), ...f.encode("[]")];
  for (const b of wire) f.feed(Uint8Array.of(b));
  assert.equal(dec.decode(f.nextFrame()), '{"x":1}');
  assert.equal(dec.decode(f.nextFrame()), "[]");
  assert.equal(f.nextFrame(), null);
  const bad = new ContentLength(4);
  bad.feed(enc.encode("Content-Length: 5\r\n\r\n"));
  assert.throws(() => bad.nextFrame(), FrameError);
});

class Store extends denobridge.ResourceProvider {
  create({ props }) {
    return { id: "r1", state: props };
  }
  read() {
    return denobridge.GONE;
  }
  answerAfterNext(method, params) {
    return method === "create" && params.props.defer === true;
  }
}

test("denobridge: health, unknown methods, bad params, held answers, shutdown", () => {
  const input = [
    '{"jsonrpc":"2.0","id":0,"method":"health"}',
    '{"jsonrpc":"2.0","id":1,"method":"create","params":{"props":{"defer":true}}}',
    '{"jsonrpc":"2.0","id":2,"method":"open","params":{}}',
    '{"jsonrpc":"2.0","id":3,"method":"update","params":{}}',
    '{"jsonrpc":"2.0","id":4,"method":"read","params":{"id":"r1","props":{}}}',
    "not json",
    '{"jsonrpc":"2.0","id":5,"method":"shutdown"}',
    '{"jsonrpc":"2.0","id":6,"method":"health"}',
  ].join("\n");
  const { io, sent } = memory(input + "\n");
  assert.throws(() => denobridge.serve(new Store(), io), FrameError); // "not json" ends the stream
  assert.deepEqual(sent.map((s) => s.trimEnd()), [
    '{"jsonrpc":"2.0","id":0,"result":{"ok":true}}',
    '{"jsonrpc":"2.0","id":2,"error":{"code":-32601,"message":"Method not found"}}',
    '{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"Invalid params","data":"missing field `id`"}}',
    '{"jsonrpc":"2.0","id":4,"result":{"exists":false}}',
    '{"jsonrpc":"2.0","id":1,"result":{"id":"r1","state":{"defer":true}}}',
  ]);
});

test("denobridge: a shutdown notification ends the loop after the held answers", () => {
  const input = [
    '{"jsonrpc":"2.0","id":1,"method":"create","params":{"props":{"defer":true}}}',
    '{"jsonrpc":"2.0","method":"shutdown"}',
    '{"jsonrpc":"2.0","id":2,"method":"health"}',
  ].join("\n");
  const { io, sent } = memory(input + "\n");
  denobridge.serve(new Store(), io);
  assert.deepEqual(sent.map((s) => s.trimEnd()), ['{"jsonrpc":"2.0","id":1,"result":{"id":"r1","state":{"defer":true}}}']);
});

class Probe extends orchard.Provider {
  schema() {
    return new orchard.ProviderSchema("probe").withAction("echo", new orchard.ActionSchema("echo"));
  }
  configure() {
    throw orchard.ProviderError.configureFailed("no");
  }
  execute(_action, attrs) {
    if (attrs.boom) throw new Error("boom");
    return attrs;
  }
  defer(_action, attrs) {
    return attrs.defer === true;
  }
}

test("orchard: describe, errors, deferred executes, shutdown", () => {
  const input = [
    '{"id":1,"method":"describe"}',
    '{"id":2,"method":"configure","params":{"config":{}}}',
    '{"id":3,"method":"execute","params":{"action":"echo","attrs":{"defer":true}}}',
    '{"id":4,"method":"execute","params":{"action":"echo","attrs":{"boom":true}}}',
    '{"id":5,"method":"execute","params":{"action":"nope"}}',
    '{"id":6,"method":"execute","params":[]}',
    '{"id":7,"method":"execute","params":{"action":"echo","attrs":{"defer":true}}}',
    '{"id":8,"method":"shutdown"}',
    '{"id":9,"method":"describe"}',
  ].join("\n");
  const { io, sent } = memory(input + "\n");
  orchard.serve(new Probe(), io);
  assert.deepEqual(sent.map((s) => s.trimEnd()), [
    '{"id":1,"result":{"schema":{"name":"probe","protocol":"1","actions":{"echo":{"description":"echo"}}}}}',
    '{"id":2,"error":{"code":"configure_failed","message":"no"}}',
    '{"id":4,"error":{"code":"internal_error","message":"execute failed"}}',
    '{"id":3,"result":{"outputs":{"defer":true}}}',
    '{"id":5,"error":{"code":"unknown_action","message":"unknown action: nope"}}',
    '{"id":6,"error":{"code":"invalid_request","message":"execute params must be an object"}}',
    '{"id":7,"result":{"outputs":{"defer":true}}}',
    '{"id":8,"result":{}}',
  ]);
});
