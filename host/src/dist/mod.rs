//! Distribution: fetching plugins by reference ([`registry`], `oci://`), the content-addressed
//! [`store`] they are kept in, the [`lock`] file that pins them, [`signing`] and verification,
//! and container [`image`]s of a plugin with sandpipe.

pub mod image;
pub mod lock;
#[cfg(feature = "registry")]
pub mod registry;
pub mod signing;
pub mod store;
