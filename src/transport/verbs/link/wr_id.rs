//! The layout of the verbs link's work request ids: what a completion is about, read back
//! from the 64-bit id the link gave its work request.
//!
//! ```text
//! bits 63..60  kind: 1 control send, 2 RDMA write, 3 receive
//! bits 59..40  a write's staging slot (NO_STAGE: it writes from the user buffer)
//! bits 39..0   a write's broadcast: the low 40 bits of its sequence number
//! ```

/// Work request ids: a kind in the top 4 bits.
pub(super) const WR_CONTROL: u64 = 1 << 60;
pub(super) const WR_WRITE: u64 = 2 << 60;
pub(super) const WR_RECV: u64 = 3 << 60;
pub(super) const KIND: u64 = 0xf << 60;
/// A write's staging slot field (bits 40..60), all ones when it writes from the user buffer.
pub(super) const NO_STAGE: u64 = 0xf_ffff;
/// A write's broadcast: the low 40 bits of its sequence number.
pub(super) const SEQ_MASK: u64 = (1 << 40) - 1;
