// What differs between `node` and a component, behind one small interface. This file is the
// Node side; `host-wasi.js` is the component side (WASI 0.2 streams and preopens), and the
// build (`build.js`) puts it in this file's place when it makes a component. Keep the two
// exporting the same names.
//
// - `read(n)` blocks for up to `n` bytes of stdin (an empty array at end of input);
//   `write(bytes)` writes all of them to stdout; `writeStderr(text)`.
// - `argv()` the plugin's arguments; `exit(code)` ends the plugin now.
// - `fs`: whole-file `readFile` (null when missing), `writeFile`, `removeFile` (false when
//   missing). In a component the path must lie in a preopened directory (`--dir`).
// - `main(entry)` runs `entry(argv())` as the plugin's main: natively right away; in a
//   component when the host calls `wasi:cli/run`.

import * as nodeFs from "node:fs";

/** Whether this is the component build. */
export const IN_WASM = false;

/** @param {number} ms */
function pause(ms) {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/**
 * Up to `n` bytes of stdin, blocking; empty at end of input.
 * @param {number} n
 * @returns {Uint8Array}
 */
export function read(n) {
  const buf = new Uint8Array(n);
  for (;;) {
    try {
      const got = nodeFs.readSync(0, buf, 0, n, null);
      return buf.subarray(0, got);
    } catch (e) {
      const code = /** @type {NodeJS.ErrnoException} */ (e).code;
      if (code === "EAGAIN") pause(1); // stdin set non-blocking by someone else: wait
      else if (code === "EOF") return buf.subarray(0, 0);
      else throw e;
    }
  }
}

/** @param {number} fd @param {Uint8Array} bytes */
function writeAll(fd, bytes) {
  let off = 0;
  while (off < bytes.length) {
    try {
      off += nodeFs.writeSync(fd, bytes, off, bytes.length - off);
    } catch (e) {
      if (/** @type {NodeJS.ErrnoException} */ (e).code === "EAGAIN") pause(1);
      else throw e;
    }
  }
}

/** Write all of `bytes` to stdout. @param {Uint8Array} bytes */
export function write(bytes) {
  writeAll(1, bytes);
}

/** @param {string} text */
export function writeStderr(text) {
  try {
    writeAll(2, new TextEncoder().encode(text));
  } catch {
    // stderr closed: nowhere left to say it
  }
}

/** The plugin's arguments, without the program name. */
export function argv() {
  return process.argv.slice(2);
}

/** End the plugin now with `code` (0 is success). @param {number} code @returns {never} */
export function exit(code) {
  process.exit(code);
}

/** @param {unknown} e */
function missing(e) {
  return /** @type {NodeJS.ErrnoException} */ (e).code === "ENOENT";
}

export const fs = {
  /** @param {string} path @returns {Uint8Array | null} */
  readFile(path) {
    try {
      return new Uint8Array(nodeFs.readFileSync(path));
    } catch (e) {
      if (missing(e)) return null;
      throw e;
    }
  },
  /** @param {string} path @param {Uint8Array | string} data */
  writeFile(path, data) {
    nodeFs.writeFileSync(path, data);
  },
  /** @param {string} path @returns {boolean} whether it existed */
  removeFile(path) {
    try {
      nodeFs.unlinkSync(path);
      return true;
    } catch (e) {
      if (missing(e)) return false;
      throw e;
    }
  },
};

/**
 * Run `entry(argv())` as the plugin: an uncaught error is one line on stderr and status 2; a
 * return (or a resolved promise) is status 0.
 * @param {(args: string[]) => unknown} entry
 */
export function main(entry) {
  const fail = (/** @type {unknown} */ e) => {
    writeStderr(`${programName()}: ${describe(e)}\n`);
    exit(2);
  };
  try {
    const r = entry(argv());
    if (r instanceof Promise) r.then(() => exit(0), fail);
  } catch (e) {
    fail(e);
  }
}

function programName() {
  const script = process.argv[1] ?? "plugin";
  return script.slice(script.lastIndexOf("/") + 1).replace(/\.m?js$/, "");
}

/** @param {unknown} e */
export function describe(e) {
  return e instanceof Error ? `${e.name}: ${e.message}` : String(e);
}
