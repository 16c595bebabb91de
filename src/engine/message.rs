//! What ranks say to each other during a broadcast, independent of how a transport frames it.

use std::ops::Range;

/// Header of one data segment. Every segment carries the broadcast's identity (sequence
/// number, root, message size, segment size, lane count) so that ranks that disagree about
/// the broadcast detect it instead of mixing data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataHeader {
    /// Broadcast number on this communicator (every rank counts its broadcasts).
    pub seq: u64,
    pub root: u32,
    pub msize: u64,
    pub segment: u32,
    pub lanes: u16,
    pub lane: u16,
    /// Segment number within the lane.
    pub index: u32,
    /// Payload bytes that follow the header.
    pub len: u32,
}

/// One message between two ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message {
    /// A segment; `len` payload bytes follow.
    Data(DataHeader),
    /// Child to parent: "I hold the first `consumed` segments of lane `lane`" (cumulative, so
    /// a lost or repeated credit does no harm). Returns window space to the parent.
    Credit { seq: u64, lane: u16, consumed: u32 },
    /// Child to parent (deep broadcasts only, e.g. a barrier's gather phase): "my whole subtree
    /// of lane `lane` holds the message".
    Done { seq: u64, lane: u16 },
}

impl Message {
    pub fn seq(&self) -> u64 {
        match *self {
            Message::Data(h) => h.seq,
            Message::Credit { seq, .. } | Message::Done { seq, .. } => seq,
        }
    }
}

/// A message the engine wants sent. For `Message::Data`, the payload is `payload` of the user
/// buffer: the transport sends it from there (no copy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    pub to: usize,
    pub message: Message,
    pub payload: Range<usize>,
}

/// Where the payload of an arriving segment goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// Straight into the user buffer at this range; then call `handle_data`.
    Into(Range<usize>),
    /// A duplicate or stale segment: read and drop the payload.
    Discard,
    /// It belongs to a later broadcast: keep it (unread) until that broadcast starts.
    Later,
}
