//! The RDMA verbs link: each segment is an RDMA WRITE WITH IMMEDIATE from the parent's
//! registered user buffer straight into the child's, at the segment's offset (issue 17;
//! docs/verbs.md).
//!
//! - [`ops`]: the verbs operations the link relies on, as a trait ([`ops::Verbs`]).
//! - [`link`]: the protocol ([`VerbsLink`]), over any backend of that trait, with a queue
//!   pair per tree edge made when a broadcast first uses the edge.
//! - [`handshake`]: the side channel on which two ranks connect an edge's queue pair.
//! - [`wire::verbs`](crate::wire::verbs): its small messages (adverts, credits, ring
//!   releases) and immediates.
//! - [`mr_cache`]: memory registrations by address range.
//! - [`waitset`]: the one descriptor the link waits on (completions, side channel), also
//!   its `wait_fd` under a router.
//! - [`model`]: an in-memory MODEL of the verbs semantics, on which the protocol is tested
//!   (here and in the links' conformance suite, tests/links.rs): these machines have no RDMA
//!   device.
//! - `sys` (cargo feature `verbs`): the real backend over libibverbs (rdma-sys), one file per
//!   verbs object. It builds here; it has not run on hardware.

pub mod handshake;
pub mod link;
pub mod mr_cache;
pub mod ops;
pub mod waitset;

pub mod model;
#[cfg(feature = "verbs")]
pub mod sys;
#[cfg(test)]
mod tests;

pub use link::{LinkConfig, VerbsLink};

use ops::{Verbs, VerbsError};

/// Which device, port and GID table entry to use (`PIPECAST_VERBS_DEVICE`, `_PORT`,
/// `_GID_INDEX`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceConfig {
    /// Device name (`mlx5_0`, `rxe0`); `None`: the first one.
    pub device: Option<String>,
    /// Port number (1 when 0).
    pub port: u8,
    /// GID table index: on RoCE the entry of the wanted address and RoCE version (see
    /// `show_gids`); on InfiniBand 0.
    pub gid_index: u8,
}

/// Most queue pairs `PIPECAST_VERBS_MAX_QPS` may keep: the completion queue then holds
/// 2048 × (128 + 256) = 786,432 completions, within what devices offer (mlx5: 4M).
pub const MAX_QPS_LIMIT: usize = 2048;

/// The link a communicator of `size` ranks uses at `rank`, on the device of `config`,
/// keeping up to `max_qps` queue pairs (its completion queue sized for them), taking queue
/// pair handshakes on `ip` (the address of the rank's TCP link): fails when this build has
/// no verbs (feature off) or the host no usable device.
pub fn open(
    rank: usize,
    size: usize,
    config: &DeviceConfig,
    max_qps: usize,
    ip: std::net::IpAddr,
) -> Result<VerbsLink<Box<dyn Verbs>>, VerbsError> {
    let cfg = LinkConfig {
        max_qps,
        ..LinkConfig::default()
    };
    let (verbs, describe) = device(config, &cfg)?;
    VerbsLink::new(rank, size, verbs, cfg, describe, ip)
}

#[cfg(feature = "verbs")]
fn device(config: &DeviceConfig, cfg: &LinkConfig) -> Result<(Box<dyn Verbs>, String), VerbsError> {
    let v = sys::DeviceVerbs::open(config, cfg.cq_entries(), cfg.send_depth, cfg.recv_depth)?;
    let describe = v.describe();
    Ok((Box::new(v), describe))
}

#[cfg(not(feature = "verbs"))]
fn device(
    _config: &DeviceConfig,
    _cfg: &LinkConfig,
) -> Result<(Box<dyn Verbs>, String), VerbsError> {
    Err(VerbsError::NotBuilt)
}
