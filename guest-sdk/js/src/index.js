// sandpipe guest SDK for JavaScript: write a stdio plugin once, run it under `node` or as a
// WASI component (see ../README.md).

export * as host from "./host.js";
export * as json from "./json.js";
export * as framing from "./framing.js";
export * as jsonrpc from "./jsonrpc.js";
export * as denobridge from "./denobridge.js";
export * as orchard from "./orchard.js";
export { Framed, stdio } from "./stdio.js";
export { main } from "./host.js";
