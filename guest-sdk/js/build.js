#!/usr/bin/env node
// Build a JS plugin into a WASI component (componentize-js) or a one-file script for `node`.
//
//   node guest-sdk/js/build.js PLUGIN.js -o plugin.wasm            # the component
//   node guest-sdk/js/build.js PLUGIN.js --native -o plugin.mjs    # one file for node
//
// PLUGIN.js imports the SDK (`guest-sdk/js/src/index.js`) and calls `main(entry)`. Both builds
// bundle the plugin and the SDK into one ES module with rolldown:
// - native: `#!/usr/bin/env node` (`--node PATH` changes it) and mode 755, so the plugin is one
//   file (sandpipe's native mode lets a plugin read its own file and /usr, nothing else);
// - component: `src/host.js` is replaced by `src/host-wasi.js` (WASI streams and preopens),
//   the bundle exports `wasi:cli/run`, and componentize-js 0.23 (StarlingMonkey) makes the
//   component for the world in `wit/`, with the `http` and `fetch-event` features off (sandpipe
//   offers no `wasi:http`).
//
// The toolchain (rolldown, componentize-js) is the one pinned by guest-sdk/js/package-lock.json:
// found in `--toolchain DIR`, `$SANDPIPE_JS_TOOLCHAIN`, `$SANDPIPE_PEERS_DIR/js-toolchain`
// (what .ci/setup installs), `~/.cache/sandpipe-ci/peers/js-toolchain`, or guest-sdk/js itself
// after `npm ci` there.

import { spawnSync } from "node:child_process";
import { chmodSync, cpSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync, renameSync } from "node:fs";
import { tmpdir, homedir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const SDK = dirname(fileURLToPath(import.meta.url));
const HOST_NODE = join(SDK, "src", "host.js");
const HOST_WASI = join(SDK, "src", "host-wasi.js");
const WASI_VERSION = "0.2.12";

function usage(/** @type {string} */ why) {
  process.stderr.write(`build.js: ${why}\nusage: node guest-sdk/js/build.js PLUGIN.js -o OUT [--native] [--node PATH] [--toolchain DIR]\n`);
  process.exit(2);
}

function parseArgs(/** @type {string[]} */ argv) {
  const a = { plugin: "", out: "", native: false, node: "/usr/bin/env node", toolchain: "" };
  for (let i = 0; i < argv.length; i++) {
    const x = argv[i];
    const value = () => argv[++i] ?? usage(`${x} needs a value`);
    if (x === "-o" || x === "--output") a.out = value();
    else if (x === "--native") a.native = true;
    else if (x === "--node") a.node = value();
    else if (x === "--toolchain") a.toolchain = value();
    else if (x.startsWith("-")) usage(`unknown option ${x}`);
    else if (!a.plugin) a.plugin = x;
    else usage(`one plugin at a time (got ${x})`);
  }
  if (!a.plugin) usage("no plugin file");
  if (!a.out) usage("no -o OUT");
  return a;
}

/** The directory whose node_modules holds the pinned toolchain. @param {string} explicit */
function toolchain(explicit) {
  const peers = process.env.SANDPIPE_PEERS_DIR || join(homedir(), ".cache/sandpipe-ci/peers");
  const candidates = explicit ? [explicit] : [process.env.SANDPIPE_JS_TOOLCHAIN, join(peers, "js-toolchain"), SDK].filter(Boolean);
  for (const dir of /** @type {string[]} */ (candidates)) {
    if (existsSync(join(dir, "node_modules/@bytecodealliance/componentize-js/package.json")) && existsSync(join(dir, "node_modules/rolldown/package.json"))) {
      return resolve(dir);
    }
  }
  process.stderr.write(`build.js: the JS toolchain (rolldown, componentize-js) is not installed in ${candidates.join(" or ")}: run .ci/setup, or npm ci in guest-sdk/js\n`);
  process.exit(3);
}

/** Bundle `input` into one ES module at `out`. */
async function bundle(/** @type {string} */ tools, /** @type {string} */ input, /** @type {string} */ out, /** @type {boolean} */ wasm) {
  const { rolldown } = await import(pathToFileURL(join(tools, "node_modules/rolldown/dist/index.mjs")).href);
  const swapHost = {
    name: "sandpipe-host-wasi",
    load(/** @type {string} */ id) {
      return wasm && resolve(id) === HOST_NODE ? readFileSync(HOST_WASI, "utf8") : null;
    },
  };
  const b = await rolldown({
    input,
    platform: wasm ? "neutral" : "node",
    external: wasm ? [/^wasi:/] : [/^node:/],
    plugins: [swapHost],
    logLevel: "warn",
  });
  await b.write({ file: out, format: "esm", sourcemap: false });
  await b.close();
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const plugin = resolve(a.plugin);
  const out = resolve(a.out);
  const tools = toolchain(a.toolchain);
  const scratch = mkdtempSync(join(tmpdir(), "sandpipe-js-"));
  try {
    if (a.native) {
      const tmp = join(scratch, "plugin.mjs");
      await bundle(tools, plugin, tmp, false);
      // The bundler keeps the plugin's own `#!` line, if any: put ours in its place.
      const text = readFileSync(tmp, "utf8").replace(/^#![^\n]*\n/, "");
      writeFileSync(tmp, `#!${a.node}\n${text}`);
      chmodSync(tmp, 0o755);
      renameOrCopy(tmp, out);
      return;
    }
    const entry = join(scratch, "entry.js");
    writeFileSync(entry, `import ${JSON.stringify(plugin)};\nexport { run } from ${JSON.stringify(HOST_NODE)};\n`);
    const app = join(scratch, "app");
    const source = join(app, "plugin.js");
    await bundle(tools, entry, source, true);
    const wit = join(scratch, "wit");
    cpSync(join(SDK, "wit"), wit, { recursive: true });
    const builtin = join(tools, `node_modules/@bytecodealliance/jco/lib/wit/builtin/${WASI_VERSION}`);
    for (const pkg of ["cli", "io", "clocks", "filesystem", "random", "sockets"]) {
      cpSync(join(builtin, `wasi-${pkg}`), join(wit, "deps", pkg), { recursive: true });
    }
    const cli = join(tools, "node_modules/@bytecodealliance/componentize-js/src/cli.js");
    const tmp = join(scratch, "plugin.wasm");
    const r = spawnSync(process.execPath, [cli, source, "--wit", wit, "--world-name", "plugin", "-d", "http", "fetch-event", "-o", tmp], { stdio: ["ignore", "inherit", "inherit"] });
    if (r.status !== 0) {
      process.stderr.write(`build.js: componentize-js failed (${r.status ?? r.signal})\n`);
      process.exit(1);
    }
    renameOrCopy(tmp, out);
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

function renameOrCopy(/** @type {string} */ from, /** @type {string} */ to) {
  try {
    renameSync(from, to);
  } catch {
    cpSync(from, to);
  }
}

main().catch((e) => {
  process.stderr.write(`build.js: ${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
