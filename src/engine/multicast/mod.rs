//! Reliable multicast broadcast: the protocol, pure (no sockets; time is `u64` ns passed in).
//!
//! The root sends every segment of the message once, to the job's multicast group; every
//! other rank lands each segment straight at its place in its buffer. What the group loses is
//! repaired, and the root never handles P acknowledgements:
//!
//! - **An ack tree** (a parent per rank, given by the caller: any tree rooted at the root, e.g.
//!   the contention-free tree of the plan). Each rank reports to its parent a *cumulative*
//!   acknowledgement of its whole subtree: segments `0..value` are held by it and by every
//!   rank below it (the minimum of its own prefix and its children's reports). A rank
//!   reports when that value grew by [`Config::ack_every`] segments, when it reaches the end,
//!   and whenever the root's sync asks. The root's window thus rests on the slowest receiver
//!   of the whole group while it hears only from its own children.
//! - **Credit window** (the root): segment `i` leaves only while `i < acked + window`, where
//!   `acked` is the smallest report of the root's children; an optional token bucket
//!   ([`Config::rate`], the links' [`Pacer`](super::reliable::Pacer)) paces new segments.
//! - **NACKs, suppressed and aggregated up the tree**: a receiver learns that segment `i` was
//!   sent when a later one arrives (or from the root's sync); after [`Config::nack_delay`]
//!   (reordering) it asks its *parent* for the missing runs, at most [`Config::nack_max`]
//!   segments a round, and asks again for the same segment after [`Config::nack_interval`],
//!   then twice, four times … as long (backoff). A parent that holds the segment queues a
//!   repair by unicast, paced as the root's stream ([`Config::rate`]), and does not repair
//!   it to the same child again while a copy is queued or until half an interval after the
//!   last copy left; one that lacks it too remembers who asked and repairs them when it
//!   arrives — its own NACK, one per segment however many children asked, is what goes up.
//!   The root re-multicasts a segment that [`Config::group_repair`] of its children asked
//!   for (a loss near the root hit whole subtrees; suppressed alike) and repairs the others
//!   by unicast. The NACK and sync parameters are the simulator's
//!   ([`crate::model::multicast::REPAIR`]).
//! - **Sync** (the root): right behind its last segment, and when its window has not moved
//!   for [`Config::sync_interval`], the root multicasts how many segments it sent; every
//!   rank then NACKs its lost tail (which no later segment reveals) and sends its report to
//!   its parent again (a lost report, or a late rank). Repeated every interval while the
//!   root is stalled: it is also the group's heartbeat.
//! - **Liveness**: a rank that waits for its parent's repairs pings it (an ack that asks for
//!   an answer) when it has not heard from it for a sync interval; a parent waited for that
//!   stays silent for [`Config::liveness`], or a child that neither answers the root's syncs
//!   nor reports, is *gone*: the rank fails and the failure travels to the root (an abort up
//!   the tree), which multicasts it to everyone; a failed rank answers anything with the
//!   abort. A *late* rank — one that has not posted the broadcast yet — is alive: whoever
//!   holds its place answers syncs and pings ([`absent_answer`]), so it is waited for
//!   however long.
//! - **Completion** is deep: a rank is done when it holds every segment and its whole
//!   subtree reported holding them all (so that it still repairs its children until then);
//!   the root when every rank did. A finished rank must keep answering for a while
//!   ([`absent_answer`] with [`Absent::Finished`]), as a report to its parent may be lost.
//!
//! Prior art, read, not copied: UCC's TL/MLX5 multicast (a window of packets, then a
//! reliability round in which children report up a tree relative to the root and what is
//! missing is sent point to point) and MVAPICH2's NACK-based multicast (receivers report
//! gaps; suppression at the root). Here the two are one continuous protocol: cumulative
//! reports in place of per-window rounds, NACKs to the parent in place of to the root.
//!
//! One concept per file: [`Member`] (one rank's part in one broadcast) here; the carriers
//! (UDP/IP multicast, raw Ethernet to a group MAC) and their frames are in
//! `transport::mcast` and `wire::mcast`.

#![deny(unsafe_code)]

mod member;

pub use member::{Member, State, Stats};

/// Bytes a data frame carries besides its segment (`wire::mcast::DATA_HEADER_LEN`): what the
/// pacer charges per segment with its payload.
pub const DATA_HEADER: u64 = 32;

/// A bucket's depth in segments at most where there is loss: a root that has seen any (a
/// spare above 0), and every rank's repairs (`Member`'s pacer; [`Config::burst`] otherwise).
pub const LOSS_BURST_SEGMENTS: u64 = 16;

/// Protocol tuning (times in ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Segments the root may send beyond the slowest report.
    pub window: u32,
    /// A rank reports to its parent when its subtree's value grew by this many segments.
    pub ack_every: u32,
    /// How long a gap waits before it is NACKed (a reordered segment may still come).
    pub nack_delay: u64,
    /// A segment NACKed once is NACKed again after this long at most: after the time this
    /// rank's repairs take and four deviations (at least `nack_min`), each further time
    /// after twice the time before, up to `nack_backoff` doublings
    /// (`model::multicast::backoff`). A repair of a segment to a child is not sent again
    /// until half of `nack_min` has passed since its last copy left this rank (repairs
    /// leave at the pace, after what is queued).
    pub nack_interval: u64,
    /// Doublings of the NACK retry's wait at most.
    pub nack_backoff: u32,
    /// The first retry's wait at least, once the repairs' time is measured (see
    /// [`crate::model::multicast::Repair::nack_wait_min_ns`]); `nack_interval` at most.
    pub nack_min: u64,
    /// Most segments one NACK round asks for; more wait until the parent had the time to
    /// send these at the pace.
    pub nack_max: u32,
    /// The root syncs when its window has not moved for this long, and again every interval;
    /// a waiting rank pings its parent when it has not heard from it for this long.
    pub sync_interval: u64,
    /// A peer waited for that is silent this long is gone.
    pub liveness: u64,
    /// The root re-multicasts a segment this many of its children asked for (0: never).
    pub group_repair: usize,
    /// Paces what a rank multicasts and repairs (bytes per second), if set: the root's new
    /// segments and its repairs share one bucket (its uplink); another rank's repairs are
    /// paced alike.
    pub rate: Option<u64>,
    /// The pacer's bucket (bytes): what the path absorbs at once beyond the pace (the
    /// communicator: `comm::multicast_setup::burst`), a root's while it has seen no loss
    /// (then, and for repairs, [`LOSS_BURST_SEGMENTS`] segments at most).
    pub burst: u64,
    /// What a root that has seen no loss may send beyond its bucket when its thread ran late
    /// (bytes; `engine::reliable::Pacer::set_catch_up`): the pace it owes, that much at
    /// most (the communicator: `comm::multicast_setup::catch_up`). 0: none.
    pub catch_up: u64,
    /// What a root that saw loss (a spare above 0, or [`Config::seen_loss`]) may send beyond
    /// its bucket when its thread ran late, counted only from when none of its repairs is
    /// pending or in flight (no repair queued, no NACK from a child and no repair left for
    /// [`Config::nack_min`]): the scheduler's lateness, not the network's (the communicator:
    /// `comm::multicast_setup::loss_catch_up`). 0: none.
    pub loss_catch_up: u64,
    /// This rank saw loss in an earlier broadcast (the communicator remembers it): as the
    /// root it catches up by [`Config::loss_catch_up`], not [`Config::catch_up`], even where
    /// its spare has fallen back to 0 between losses.
    pub seen_loss: bool,
    /// The root's bucket holds this many bytes when the broadcast starts (what it gathered
    /// since the last broadcast this rank rooted: [`Member::uplink`]'s level then); `None`: full.
    pub tokens: Option<u64>,
    /// The root's pace starts this many thousandths below `rate` (what this rank learned of
    /// the loss in earlier broadcasts: [`Member::spare`]); it moves with the NACKs it sees
    /// ([`crate::model::multicast::PACE`]).
    pub spare: u32,
}

impl Default for Config {
    /// The NACK and sync parameters are the simulator's ([`crate::model::multicast::REPAIR`]).
    fn default() -> Config {
        let r = crate::model::multicast::REPAIR;
        Config {
            window: 256,
            ack_every: 32,
            nack_delay: r.nack_delay_ns,
            nack_interval: r.nack_wait_ns,
            nack_backoff: r.backoff_max,
            nack_min: r.nack_wait_min_ns,
            nack_max: r.nack_max,
            sync_interval: r.sync_ns,
            liveness: 5_000_000_000,
            group_repair: 2,
            rate: None,
            burst: 256 * 1024,
            catch_up: 0,
            loss_catch_up: 0,
            seen_loss: false,
            tokens: None,
            spare: 0,
        }
    }
}

/// A rank's place in the ack tree of one broadcast.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    pub me: usize,
    pub root: usize,
    /// `None` exactly at the root.
    pub parent: Option<usize>,
    pub children: Vec<usize>,
}

/// Where a message goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum To {
    /// The job's multicast group (every rank but the sender).
    Group,
    Rank(usize),
}

/// What ranks say to each other in one broadcast.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Msg {
    /// Segment `index` (its bytes: [`Member::segment_range`] of the sender's buffer); `repair`
    /// when sent again.
    Data { index: u32, repair: bool },
    /// Segments `index..index + count` are missing here.
    Nack { index: u32, count: u32 },
    /// Segments `0..value` are held by the sender and its whole subtree; `ping`: answer me.
    Ack { value: u64, ping: bool },
    /// The root sent segments `0..sent` (to the group), or a parent's `answer` to a ping.
    Sync { sent: u64, answer: bool },
    /// The broadcast failed: rank `gone` is gone.
    Abort { gone: usize },
}

/// One message to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Out {
    pub to: To,
    pub msg: Msg,
}

/// Why a broadcast failed at a rank.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McastError {
    #[error("rank {rank} is gone: silent for {silent_ms} ms while this rank waited for it")]
    Gone { rank: usize, silent_ms: u64 },
    #[error("the broadcast was aborted: rank {gone} is gone (reported by rank {by})")]
    Aborted { gone: usize, by: usize },
    #[error("bad multicast broadcast: {0}")]
    Invalid(String),
}

impl McastError {
    /// The rank that is gone, if any.
    pub fn gone(&self) -> Option<usize> {
        match self {
            McastError::Gone { rank, .. } => Some(*rank),
            McastError::Aborted { gone, .. } => Some(*gone),
            McastError::Invalid(_) => None,
        }
    }
}

/// Segments of a message of `msize` bytes cut into `segment`-byte segments: at least one (a
/// zero-byte broadcast is one empty segment, which still synchronizes the group).
pub fn segments(msize: u64, segment: u32) -> Option<u32> {
    if segment == 0 {
        return None;
    }
    u32::try_from(msize.div_ceil(u64::from(segment)).max(1)).ok()
}

/// Why a rank holds no [`Member`] for a broadcast it is part of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Absent {
    /// Not posted yet (a late rank): alive, holding nothing.
    NotYet,
    /// Finished: it and its whole subtree hold all `segments`.
    Finished { segments: u64 },
    /// Failed because rank `gone` is gone.
    Failed { gone: usize },
}

/// What a rank that holds no [`Member`] for a broadcast answers to `msg` from `from`, so that
/// a late rank is waited for and a finished one's lost report is repeated: a root's sync is
/// answered with a report to `parent`, a child's ping with a sync; a failed rank answers
/// everything but an abort with its abort.
pub fn absent_answer(parent: Option<usize>, absent: Absent, from: usize, msg: Msg) -> Option<Out> {
    let value = match absent {
        Absent::NotYet => 0,
        Absent::Finished { segments } => segments,
        Absent::Failed { gone } => {
            return (!matches!(msg, Msg::Abort { .. })).then_some(Out {
                to: To::Rank(from),
                msg: Msg::Abort { gone },
            })
        }
    };
    match msg {
        Msg::Sync { answer: false, .. } => parent.map(|p| Out {
            to: To::Rank(p),
            msg: Msg::Ack { value, ping: false },
        }),
        Msg::Ack { ping: true, .. } => Some(Out {
            to: To::Rank(from),
            msg: Msg::Sync {
                sent: value,
                answer: true,
            },
        }),
        _ => None,
    }
}
