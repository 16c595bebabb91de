//! [`Driver`]: everything a link may ask of the layer above it, in the link's terms. A link
//! moves bytes; the driver ([`Engine`](super::drive::Engine), driven by the communicator's
//! progress thread) owns the
//! broadcasts: it says what to send next, where an arriving segment lands, when a message is
//! whole, which peers a broadcast waits for, and how long a round may sleep. A link never
//! sees the engine itself, so the next links (multicast, AF_XDP, UCX or libfabric) stay
//! small and the ones we have cannot drift apart (docs/engine.md, "Links").
//!
//! Zero copy stays: an [`Outgoing`] names the payload's range in its broadcast's buffer (the
//! link sends it from there), and [`Driver::header`] answers a segment's header with the
//! range its payload lands in (`transport::slot`), before the link reads it.
//!
//! The trait lives in the pure core, below the links: they depend on it from below, and the
//! engine's own implementation ([`Engine`](super::drive::Engine)) is pure, so every layer's
//! tests can drive a link with it (docs/engine.md, "Links").

use super::{DataHeader, Expected, Layout, Message};
use std::ops::Range;
use std::time::Duration;

/// A message to send, from [`Driver::next`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// The peer it goes to.
    pub to: usize,
    /// What it says (its header: [`wire::message`](crate::wire::message)).
    pub message: Message,
    /// The rail (NIC) it leaves through: its lane's rail (lane i of a plan on rails leaves
    /// through NIC i, its data and its credits back); 0 without rails.
    pub rail: usize,
    /// The broadcast whose buffer holds the payload.
    pub seq: u64,
    /// The payload: this range of broadcast `seq`'s buffer (empty for a control message).
    pub payload: Range<usize>,
}

/// Where the payload of an arriving segment goes, from [`Driver::header`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Landing {
    /// Straight into broadcast `seq`'s buffer at `range` (`transport::slot`), always the
    /// header's length; once it is all there, [`Driver::landed`].
    Into { seq: u64, range: Range<usize> },
    /// Of a broadcast not posted here yet: read it into memory of its own (at most one
    /// segment: the driver checked the length), then [`Driver::held`].
    Hold,
    /// A duplicate or a segment of a finished broadcast: read it and drop it.
    Discard,
}

/// A broadcast in flight as a link that names segments by number sees it (RDMA verbs: its
/// immediates carry a segment's number, its adverts a broadcast's shape).
#[derive(Debug, Clone, Copy)]
pub struct Broadcast<'a> {
    pub seq: u64,
    pub root: u32,
    /// How its message is cut into lanes and segments.
    pub layout: &'a Layout,
}

impl Broadcast<'_> {
    /// The header of segment `index` of lane `lane`, or `None` if there is none.
    pub fn header(&self, lane: usize, index: u32) -> Option<DataHeader> {
        self.layout.header(self.seq, self.root, lane, index)
    }
}

/// The broadcasts' memory, as the driver sees it: a held segment lands in broadcast `seq`'s
/// buffer through it ([`Driver::held`]). The links' lent buffers (`transport::Buffers`)
/// are one.
pub trait Memory {
    /// Broadcast `seq`'s buffer; an error naming `from` (whose segment it was) when that
    /// broadcast finished here.
    fn buffer(&mut self, from: usize, seq: u64) -> crate::Result<&mut [u8]>;
}

/// What a link may ask of the layer above it. [`Engine`](super::drive::Engine) implements it
/// over one rank's broadcasts in flight; the communicator's progress thread hands it to every
/// round of a link's `progress` (`transport::Link`).
pub trait Driver {
    /// The next message to one of the peers this link serves (`serves`), oldest broadcast
    /// first; `None` when there is nothing more to send to them now.
    fn next(&mut self, now: u64, serves: &dyn Fn(usize) -> bool) -> Option<Outgoing>;

    /// A segment's header arrived from `from`: where its payload goes (the one landing
    /// decision: destination, fit check, hold for a broadcast not posted yet). An error (a
    /// mismatch, a bad sender, a segment too long to hold) fails the round.
    fn header(&mut self, from: usize, h: &DataHeader) -> crate::Result<Landing>;

    /// A message from `from` is whole here: a segment's payload landed where
    /// [`header`](Self::header) said (`Landing::Into`), or a control message (credit, done)
    /// arrived.
    fn landed(&mut self, now: u64, from: usize, message: &Message) -> crate::Result<()>;

    /// A segment from `from` read whole into memory of its own (`Landing::Hold`): lands in
    /// its broadcast's buffer (in `bufs`) if that was posted meanwhile, else is kept until it
    /// is.
    fn held(
        &mut self,
        bufs: &mut dyn Memory,
        now: u64,
        from: usize,
        message: Message,
        payload: Vec<u8>,
    ) -> crate::Result<()>;

    /// Every peer a broadcast in flight waits for: a link keeps them alive (heartbeats) and
    /// fails the round when one of them is gone (`transport::check_closed`).
    fn waiting_for(&self) -> Vec<usize>;

    /// Every peer the broadcasts in flight talk to (a link that sets up and closes edges on
    /// demand, RDMA verbs, keeps theirs).
    fn talks_to(&self) -> Vec<usize>;

    /// A number that changes whenever the set of broadcasts in flight changes (one posted or
    /// finished): what a link derives from them ([`Driver::talks_to`]) holds until it does.
    fn in_flight(&self) -> u64;

    /// The segments this rank may receive next from the peers this link serves (`serves`),
    /// each with its broadcast and byte range: what a link that pre-posts receives or
    /// exposes memory (RDMA verbs) prepares for.
    fn expected(&self, serves: &dyn Fn(usize) -> bool) -> Vec<Expected>;

    /// Broadcast `seq`, while it runs here.
    fn broadcast(&self, seq: u64) -> Option<Broadcast<'_>>;

    /// How long this round may still wait for the network, given the `wait` it was handed:
    /// the one "may I sleep" rule (not at all once a broadcast in flight is over here,
    /// its driver must hand it back first). A link asks after its sends, which may have
    /// finished one.
    fn may_wait(&self, wait: Duration) -> Duration;
}
