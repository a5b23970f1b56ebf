// The framers, sans-IO: bytes in with `feed`, whole frames out with `nextFrame`, a frame's
// bytes on the wire from `encode`. The same contracts as sandpipe's Rust framers
// (proto/src/frame): `nextFrame()` is `null` until a whole frame is in, a corrupt stream
// throws a `FrameError`, and a frame's length is checked against the limit before it is
// buffered whole.
//
// - JSON Lines (`"lines"`): one JSON text per `\n`-terminated line (a `\r` before the `\n` is
//   dropped; blank lines are skipped); each line must be JSON (checked on arrival).
// - Content-Length (`"content-length"`): LSP headers `Content-Length: N\r\n...\r\n\r\n`, then
//   N bytes.

import { parse } from "./json.js";

/** The default largest frame: 16 MiB, as on the Rust side. */
export const MAX_FRAME_BYTES = 16 << 20;
/** The largest Content-Length header block. */
export const MAX_HEADER_BYTES = 8 << 10;

/** A stream that can no longer be framed. */
export class FrameError extends Error {
  /** @param {string} message @param {{limit?: number, got?: number}} [fields] */
  constructor(message, fields = {}) {
    super(message);
    this.name = "FrameError";
    Object.assign(this, fields);
  }
}

const encoder = new TextEncoder();

/** Bytes received but not yet framed. */
class Buffer {
  constructor() {
    /** @type {Uint8Array} */
    this.bytes = new Uint8Array(0);
  }
  /** @param {Uint8Array} data */
  push(data) {
    if (this.bytes.length === 0) {
      this.bytes = data.slice();
      return;
    }
    const next = new Uint8Array(this.bytes.length + data.length);
    next.set(this.bytes);
    next.set(data, this.bytes.length);
    this.bytes = next;
  }
  /** @param {number} n */
  take(n) {
    const out = this.bytes.slice(0, n);
    this.bytes = this.bytes.subarray(n);
    return out;
  }
}

/** JSON Lines. */
export class JsonLines {
  /** @param {number} [maxFrameBytes] */
  constructor(maxFrameBytes = MAX_FRAME_BYTES) {
    this.max = maxFrameBytes;
    this.buf = new Buffer();
    this.scanned = 0;
  }

  /** @param {Uint8Array} data */
  feed(data) {
    this.buf.push(data);
  }

  /** The next line without its line ending, or `null` if none is complete yet. */
  nextFrame() {
    for (;;) {
      const b = this.buf.bytes;
      const nl = b.indexOf(0x0a, this.scanned);
      if (nl < 0) {
        this.scanned = b.length;
        if (b.length > this.max) {
          throw new FrameError(`frame of more than ${b.length} bytes exceeds max_frame_bytes ${this.max}`, { limit: this.max, got: b.length });
        }
        return null;
      }
      this.scanned = 0;
      let line = this.buf.take(nl + 1).subarray(0, nl);
      if (line.length && line[line.length - 1] === 0x0d) line = line.subarray(0, line.length - 1);
      if (line.length > this.max) {
        throw new FrameError(`frame of ${line.length} bytes exceeds max_frame_bytes ${this.max}`, { limit: this.max, got: line.length });
      }
      if (line.every((c) => c === 0x20 || c === 0x09)) continue;
      try {
        parse(line);
      } catch (e) {
        throw new FrameError(`line is not JSON: ${/** @type {Error} */ (e).message}`);
      }
      return line;
    }
  }

  /** End of input: bytes after the last newline are an error. */
  finish() {
    if (this.buf.bytes.some((c) => c !== 0x20 && c !== 0x09 && c !== 0x0d)) {
      throw new FrameError(`stream ended inside a line (${this.buf.bytes.length} bytes)`);
    }
  }

  /** @param {Uint8Array | string} frame */
  encode(frame) {
    const body = typeof frame === "string" ? encoder.encode(frame) : frame;
    if (body.includes(0x0a)) throw new FrameError("a JSON Lines frame cannot hold a newline");
    const out = new Uint8Array(body.length + 1);
    out.set(body);
    out[body.length] = 0x0a;
    return out;
  }
}

/** LSP base protocol: `Content-Length` headers. */
export class ContentLength {
  /** @param {number} [maxFrameBytes] */
  constructor(maxFrameBytes = MAX_FRAME_BYTES) {
    this.max = maxFrameBytes;
    this.buf = new Buffer();
    /** @type {number | null} the body length once the headers are in */
    this.want = null;
  }

  /** @param {Uint8Array} data */
  feed(data) {
    this.buf.push(data);
  }

  nextFrame() {
    if (this.want === null) {
      const b = this.buf.bytes;
      let end = -1;
      for (let i = 0; i + 3 < b.length; i++) {
        if (b[i] === 0x0d && b[i + 1] === 0x0a && b[i + 2] === 0x0d && b[i + 3] === 0x0a) {
          end = i;
          break;
        }
      }
      if (end < 0) {
        if (b.length > MAX_HEADER_BYTES) throw new FrameError(`headers of more than ${MAX_HEADER_BYTES} bytes`, { limit: MAX_HEADER_BYTES, got: b.length });
        return null;
      }
      const headers = new TextDecoder().decode(this.buf.take(end + 4).subarray(0, end));
      let length = null;
      for (const line of headers.split("\r\n")) {
        const colon = line.indexOf(":");
        if (colon < 0) throw new FrameError(`header line without a colon: ${JSON.stringify(line)}`);
        if (line.slice(0, colon).trim().toLowerCase() !== "content-length") continue;
        const v = line.slice(colon + 1).trim();
        if (!/^[0-9]{1,15}$/.test(v)) throw new FrameError(`bad Content-Length: ${JSON.stringify(v)}`);
        length = Number(v);
      }
      if (length === null) throw new FrameError("headers without Content-Length");
      if (length > this.max) throw new FrameError(`frame of ${length} bytes exceeds max_frame_bytes ${this.max}`, { limit: this.max, got: length });
      this.want = length;
    }
    if (this.buf.bytes.length < this.want) return null;
    const body = this.buf.take(this.want);
    this.want = null;
    return body;
  }

  finish() {
    if (this.want !== null || this.buf.bytes.length) throw new FrameError("stream ended inside a frame");
  }

  /** @param {Uint8Array | string} frame */
  encode(frame) {
    const body = typeof frame === "string" ? encoder.encode(frame) : frame;
    const head = encoder.encode(`Content-Length: ${body.length}\r\n\r\n`);
    const out = new Uint8Array(head.length + body.length);
    out.set(head);
    out.set(body, head.length);
    return out;
  }
}

/**
 * A framer by name: `"lines"` or `"content-length"`.
 * @param {string} framing
 * @param {number} [maxFrameBytes]
 */
export function framer(framing, maxFrameBytes = MAX_FRAME_BYTES) {
  switch (framing) {
    case "lines":
      return new JsonLines(maxFrameBytes);
    case "content-length":
      return new ContentLength(maxFrameBytes);
    default:
      throw new TypeError(`unknown framing ${JSON.stringify(framing)} (lines or content-length)`);
  }
}
