// The component side of `host.js` (see there for the interface): WASI 0.2 streams for stdio,
// `wasi:filesystem` preopens for files, `wasi:cli/environment` for arguments. The build puts
// this file in `host.js`'s place; it is never imported under Node.
//
// StarlingMonkey evaluates the module's top level at build time (Wizer), when no WASI call is
// allowed: everything here asks for its handles on first use.

import { getArguments } from "wasi:cli/environment@0.2.12";
import { exit as wasiExit } from "wasi:cli/exit@0.2.12";
import { getStdin } from "wasi:cli/stdin@0.2.12";
import { getStdout } from "wasi:cli/stdout@0.2.12";
import { getStderr } from "wasi:cli/stderr@0.2.12";
import { getDirectories } from "wasi:filesystem/preopens@0.2.12";

export const IN_WASM = true;

/** The largest write `blocking-write-and-flush` accepts. */
const WRITE_CHUNK = 4096;

/** @type {any} */ let stdin = null;
/** @type {any} */ let stdout = null;
/** @type {any} */ let stderr = null;

/** The error a failed WASI call carries: a `stream-error` or a filesystem `error-code`. */
function payload(/** @type {any} */ e) {
  return e && typeof e === "object" && "payload" in e ? e.payload : e;
}

/** @param {number} n @returns {Uint8Array} */
export function read(n) {
  stdin ??= getStdin();
  for (;;) {
    let chunk;
    try {
      chunk = stdin.blockingRead(BigInt(n));
    } catch (e) {
      const p = payload(e);
      if (p && p.tag === "closed") return new Uint8Array(0);
      throw new Error(`reading stdin: ${p && p.tag ? p.tag : String(p)}`);
    }
    // `blocking-read` may return nothing without the stream having ended: ask again.
    if (chunk.length) return chunk;
  }
}

/** @param {any} stream @param {Uint8Array} bytes */
function writeAll(stream, bytes) {
  for (let off = 0; off < bytes.length; off += WRITE_CHUNK) {
    stream.blockingWriteAndFlush(bytes.subarray(off, off + WRITE_CHUNK));
  }
}

/** @param {Uint8Array} bytes */
export function write(bytes) {
  stdout ??= getStdout();
  try {
    writeAll(stdout, bytes);
  } catch (e) {
    const p = payload(e);
    throw new Error(`writing stdout: ${p && p.tag ? p.tag : String(p)}`);
  }
}

/** @param {string} text */
export function writeStderr(text) {
  try {
    stderr ??= getStderr();
    writeAll(stderr, new TextEncoder().encode(text));
  } catch {
    // stderr closed: nowhere left to say it
  }
}

export function argv() {
  return getArguments().slice(1);
}

/** A component can only say success or failure: every non-zero code is reported as 1. */
export function exit(/** @type {number} */ code) {
  wasiExit(code === 0 ? { tag: "ok" } : { tag: "err" });
  throw new Error("wasi:cli/exit returned");
}

/** @type {Array<[any, string]> | null} */
let preopens = null;

/** The preopened directory holding `path`, and the path inside it. @param {string} path */
function locate(path) {
  preopens ??= getDirectories();
  const want = path.split("/").filter((s) => s && s !== ".");
  let best = null;
  for (const [dir, name] of preopens) {
    const base = name.split("/").filter((s) => s && s !== ".");
    if (path.startsWith("/") !== name.startsWith("/")) continue;
    if (base.length > want.length - 1 || !base.every((s, i) => s === want[i])) continue;
    if (!best || base.length > best.depth) best = { dir, depth: base.length };
  }
  if (!best) throw new Error(`${path}: not in a preopened directory`);
  return { dir: best.dir, rel: want.slice(best.depth).join("/") };
}

/** @param {any} resource */
function drop(resource) {
  resource[Symbol.dispose]?.();
}

/** @param {string} path @param {unknown} e */
function fsError(path, e) {
  return new Error(`${path}: ${String(payload(e))}`);
}

export const fs = {
  /** @param {string} path @returns {Uint8Array | null} */
  readFile(path) {
    const { dir, rel } = locate(path);
    let fd;
    try {
      fd = dir.openAt({}, rel, {}, { read: true });
    } catch (e) {
      if (payload(e) === "no-entry") return null;
      throw fsError(path, e);
    }
    try {
      const parts = [];
      let size = 0;
      for (;;) {
        const [bytes, eof] = fd.read(65536n, BigInt(size));
        parts.push(bytes);
        size += bytes.length;
        if (eof || bytes.length === 0) break;
      }
      const out = new Uint8Array(size);
      let at = 0;
      for (const p of parts) {
        out.set(p, at);
        at += p.length;
      }
      return out;
    } catch (e) {
      throw fsError(path, e);
    } finally {
      drop(fd);
    }
  },
  /** @param {string} path @param {Uint8Array | string} data */
  writeFile(path, data) {
    const bytes = typeof data === "string" ? new TextEncoder().encode(data) : data;
    const { dir, rel } = locate(path);
    let fd;
    try {
      fd = dir.openAt({}, rel, { create: true, truncate: true }, { write: true });
    } catch (e) {
      throw fsError(path, e);
    }
    try {
      let off = 0;
      while (off < bytes.length) off += Number(fd.write(bytes.subarray(off), BigInt(off)));
    } catch (e) {
      throw fsError(path, e);
    } finally {
      drop(fd);
    }
  },
  /** @param {string} path @returns {boolean} */
  removeFile(path) {
    const { dir, rel } = locate(path);
    try {
      dir.unlinkFileAt(rel);
      return true;
    } catch (e) {
      if (payload(e) === "no-entry") return false;
      throw fsError(path, e);
    }
  },
};

/** @type {((args: string[]) => unknown) | null} */
let entryPoint = null;

/** Register the plugin's main; `wasi:cli/run` calls it. @param {(args: string[]) => unknown} entry */
export function main(entry) {
  entryPoint = entry;
}

/** @param {unknown} e */
export function describe(e) {
  return e instanceof Error ? `${e.name}: ${e.message}` : String(e);
}

function fail(/** @type {unknown} */ e) {
  writeStderr(`plugin: ${describe(e)}\n`);
  exit(2);
}

/** The `wasi:cli/run` export (the build re-exports it from the component's entry). */
export const run = {
  run() {
    if (!entryPoint) fail(new Error("the plugin never called main()"));
    try {
      const r = /** @type {(args: string[]) => unknown} */ (entryPoint)(argv());
      if (r instanceof Promise) return r.then(() => undefined, fail);
    } catch (e) {
      fail(e);
    }
    return undefined;
  },
};
