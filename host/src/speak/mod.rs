//! Speaking to a running plugin: the [`driver`] that pairs requests with answers over a
//! session, the [`protocols`] registry with each protocol's hooks, and the [`supervise`]
//! bridge that enforces per-request budgets and restarts.

pub mod driver;
pub mod protocols;
pub mod supervise;
