//! Running a plugin: loading and compiling it ([`sandbox`] for wasm, the only module that names
//! wasmtime; [`native`] for a native program, the only one that spawns plugins), the session
//! that carries its frames ([`session`], over [`transport`]), its stderr ([`stderr`]), the
//! in-memory plugin of tests and benches ([`memory_plugin`]), the native program's hash cache
//! ([`hash_index`]), and the recorder that taps a session's frames ([`record`], with
//! [`cbor_note`] rendering CBOR for it).

pub(crate) mod cache_root;
pub(crate) mod cbor_note;
pub(crate) mod hash_index;
pub(crate) mod memory_plugin;
pub(crate) mod native;
pub(crate) mod read_room;
pub mod record;
pub(crate) mod sandbox;
pub(crate) mod session;
pub(crate) mod stderr;
pub(crate) mod transport;
