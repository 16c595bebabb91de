//! pipecast: contention-free pipelined broadcast for switched Ethernet clusters.
//!
//! Layers, top to bottom (see `../shared/DESIGN.md`): [`topology`] (the physical network),
//! [`plan`] (broadcast trees of the seed papers and the contention checker), [`model`] (cost
//! models and calibration profiles), [`hetero`] (seed 004's heterogeneous platforms), [`wire`]
//! (byte formats), [`engine`] (the pipelined broadcast state machine and its per-peer
//! reliability), [`sim`] (the simulated network the engine is tested on), [`transport`] (TCP, raw
//! Ethernet, verbs), [`comm`] (communicator), [`capi`] (C ABI) and [`lab`] (emulated cluster).
//! `unsafe` code lives only in `transport` and `capi`.

pub mod capi;
pub mod comm;
pub mod engine;
pub mod error;
pub mod hetero;
pub mod input;
pub mod json;
pub mod lab;
pub mod model;
pub mod plan;
pub mod sim;
#[doc(hidden)]
pub mod testing;
pub mod topology;
pub mod transport;
pub mod wire;

pub use error::{Error, Result};
