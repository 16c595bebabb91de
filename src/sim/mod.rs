//! The simulated network: pure, deterministic, on a virtual clock.
//!
//! One fabric for every test that runs ranks together without sockets. [`SimLink`] is one
//! directed edge of a topology (seeded delay, loss, reordering, duplication, optionally a
//! rate); [`SimNet`] puts a rank on each machine and runs there the code that runs on the
//! real links: the engine's [`Endpoint`](crate::engine::Endpoint) with every broadcast in
//! flight and, between ranks whose path is lossy, raw Ethernet's lossy-path adapter
//! ([`reliable::Lossy`](crate::engine::reliable::Lossy): its round robin, pacer,
//! acknowledgements and heartbeats). [`simulate`] runs
//! one whole broadcast at scale (timing only) and reports what `pipecast sim` prints;
//! [`multicast::simulate_multicast`] one multicast broadcast (issue 32: group copies by the
//! switches, seeded loss, NACK-driven repair, acks up the ack tree, a credit window).

#![deny(unsafe_code)]

mod broadcast;
mod link;
pub mod multicast;
mod net;
#[cfg(test)]
pub(crate) mod tests;

pub use broadcast::{
    simulate, simulate_on_rails, Contention, EdgeUse, Report, SimError, Timing, EDGE_LATENCY_NS,
};
pub use link::{ps_per_byte, LinkModel, LinkStats, Sent, SimLink, Through};
pub use net::{Flow, Outcome, SimNet, Stats};
