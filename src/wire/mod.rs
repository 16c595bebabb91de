//! Byte formats as typed views over bytes (smoltcp's `Packet`/`Repr` split, see STYLE.md):
//! [`ethernet`] (the Ethernet II header), [`lldp`] (IEEE 802.1AB LLDPDUs and their TLVs) and
//! [`frame`] (pipecast's own raw-Ethernet frame header) and [`bootstrap`] (the blob ranks
//! exchange when a communicator is created) and [`shm`] (records between ranks on one host) and
//! [`hello`] (the first bytes of a pipecast TCP connection) and [`message`] (the engine
//! message header of the stream links: TCP, shared memory, verbs' control messages) and
//! [`verbs`] (the RDMA verbs link's control messages and immediates) and [`joining`] (what
//! members of a communicator joined on existing engines tell each other first).
//!
//! A view (`Frame`, `Tlv`) wraps any `T: AsRef<[u8]>`, checks its length once in
//! `new_checked`, and then reads fields over fixed ranges without panicking. A `Repr` is the
//! parsed, high-level form with `parse`, `emit` and `buffer_len`. Nothing here allocates.
//! Malformed input is a [`WireError`] that says what was wrong, never a panic.

#![deny(unsafe_code)]

pub mod bootstrap;
pub mod ethernet;
pub mod frame;
pub mod hello;
pub mod joining;
pub mod lldp;
pub mod mcast;
pub mod message;
pub mod shm;
pub mod verbs;

/// A malformed frame.
#[derive(Debug, thiserror::Error, PartialEq, Eq, Clone)]
pub enum WireError {
    #[error("truncated: need {need} bytes, got {got}")]
    Truncated { need: usize, got: usize },
    #[error("bad LLDP TLV of type {kind} at byte {offset}: {reason}")]
    BadTlv {
        kind: u8,
        offset: usize,
        reason: &'static str,
    },
    #[error("LLDPDU has no {0} TLV where IEEE 802.1AB requires it (chassis ID, port ID, TTL come first, in that order)")]
    MissingTlv(&'static str),
    #[error("not an LLDP frame: EtherType {0:#06x} (LLDP is 0x88cc)")]
    NotLldp(u16),
    #[error("buffer too small to emit: need {need} bytes, have {got}")]
    BufferTooSmall { need: usize, got: usize },
    #[error("field too long for LLDP: {what} is {len} bytes, at most {max} allowed")]
    TooLong {
        what: &'static str,
        len: usize,
        max: usize,
    },
    #[error("unknown frame version {got} (this build speaks {want}): run the same pipecast version on every rank")]
    BadVersion { got: u8, want: u8 },
    #[error("bad length in {what}: {detail}")]
    BadLength { what: &'static str, detail: String },
    #[error("bad {what}: {detail}")]
    Invalid { what: &'static str, detail: String },
}
