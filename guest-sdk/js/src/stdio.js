// Framed stdin and stdout of this plugin: the plugin side of a sandpipe session.
//
//   stdin ──host.read──► framer.feed ──nextFrame──► recv() ──► your handler
//   stdout ◄──host.write (whole)── framer.encode ◄── send(frame)
//
// Blocking and single-threaded, so the same loop runs under `node` (synchronous reads of fd
// 0) and in a component (WASI `blocking-read`). Write logs with `host.writeStderr` or
// `console.error`, never to stdout.

import { framer, MAX_FRAME_BYTES } from "./framing.js";
import * as host from "./host.js";

const FIRST_READ = 8 << 10;
const MAX_READ = 64 << 10;

/** Frames over `read(n)` / `write(bytes)` (stdin and stdout unless given). */
export class Framed {
  /**
   * @param {string} framing `"lines"` or `"content-length"`
   * @param {{read?: (n: number) => Uint8Array, write?: (b: Uint8Array) => void, maxFrameBytes?: number}} [opts]
   */
  constructor(framing, opts = {}) {
    this.framer = framer(framing, opts.maxFrameBytes ?? MAX_FRAME_BYTES);
    this.read = opts.read ?? host.read;
    this.write = opts.write ?? host.write;
    this.readSize = FIRST_READ;
    this.eof = false;
  }

  /** The next frame from the host (bytes), or `null` at end of input. */
  recv() {
    for (;;) {
      const frame = this.framer.nextFrame();
      if (frame !== null) return frame;
      if (this.eof) {
        this.framer.finish();
        return null;
      }
      const data = this.read(this.readSize);
      if (data.length === 0) {
        this.eof = true;
      } else {
        if (data.length === this.readSize && this.readSize < MAX_READ) this.readSize *= 2;
        this.framer.feed(data);
      }
    }
  }

  /** Write one frame, whole. @param {Uint8Array | string} frame */
  send(frame) {
    this.write(this.framer.encode(frame));
  }
}

/** This plugin's stdin and stdout, framed. @param {string} framing */
export function stdio(framing) {
  return new Framed(framing);
}
