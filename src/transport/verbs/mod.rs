//! The RDMA verbs link: each segment is an RDMA WRITE WITH IMMEDIATE from the parent's
//! registered user buffer straight into the child's, at the segment's offset (issue 17;
//! docs/verbs.md).
//!
//! - [`ops`]: the verbs operations the link relies on, as a trait ([`ops::Verbs`]).
//! - [`link`]: the protocol ([`VerbsLink`]), over any backend of that trait.
//! - [`control`]: its small messages (adverts, credits, ring releases) and immediates.
//! - [`mr_cache`]: memory registrations by address range.
//! - `model` (tests only): an in-memory MODEL of the verbs semantics, on which the protocol is
//!   tested here: these machines have no RDMA device.
//! - `sys` (cargo feature `verbs`): the real backend over libibverbs (rdma-sys), one file per
//!   verbs object. It builds here; it has not run on hardware.

pub mod control;
pub mod link;
pub mod mr_cache;
pub mod ops;

#[cfg(test)]
pub mod model;
#[cfg(feature = "verbs")]
pub mod sys;
#[cfg(test)]
mod tests;

pub use link::{LinkConfig, VerbsLink};
