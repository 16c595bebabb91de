//! The layout of the verbs link's work request ids: what a completion is about, read back
//! from the 64-bit id the link gave its work request.
//!
//! ```text
//! bits 63..60  kind: 1 control send, 2 RDMA write, 3 receive
//! bits 59..40  a write's staging slot (NO_STAGE: it writes from the user buffer)
//! bits 39..0   a write's registration: the number the link gave its broadcast's buffer
//!              when it registered it (a local count, unique among registrations in flight;
//!              broadcast numbers carry a communicator in their high bits and would not fit)
//! ```

/// Work request ids: a kind in the top 4 bits.
pub(super) const WR_CONTROL: u64 = 1 << 60;
pub(super) const WR_WRITE: u64 = 2 << 60;
pub(super) const WR_RECV: u64 = 3 << 60;
pub(super) const KIND: u64 = 0xf << 60;
/// A write's staging slot field (bits 40..60), all ones when it writes from the user buffer.
pub(super) const NO_STAGE: u64 = 0xf_ffff;
/// A write's registration number (bits 0..40).
pub(super) const REG_MASK: u64 = (1 << 40) - 1;
