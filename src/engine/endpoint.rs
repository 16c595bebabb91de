//! Every broadcast of every communicator at one rank: the pure core the links feed
//! (quinn-proto's `Endpoint` is the model: events in by `handle_*`, messages out by
//! `poll_transmit`, no sockets, no clock).
//!
//! Broadcasts are keyed by their [`number`](super::number): communicator and sequence
//! number. A communicator posts its broadcasts in sequence-number order, the same at every
//! rank (MPI's rule for collectives, blocking and nonblocking alike, per communicator); the
//! broadcasts of different communicators may be posted in any interleaving, and several may
//! be in flight. Each arriving message is routed by its number: to its broadcast, held for a
//! broadcast this rank has not posted yet on that communicator (a late rank: its peers ran
//! ahead), or dropped when its broadcast is over here. Held messages come back when their
//! broadcast is posted ([`Endpoint::post`]). Segments still land straight in the user buffer
//! of their broadcast: `route_data` says where ([`Route::Into`]); only held segments are
//! copied (once more, when posted).
//!
//! **What a late rank holds.** A held segment returns no credit: credits come only from a
//! posted broadcast ([`Bcast::handle_data`]), so a parent sends a rank that has not posted
//! broadcast `b` at most its window of `b`'s segments per lane (the engine's `Config::window`,
//! R, agreed at every rank) and then waits. Held bytes per broadcast not posted here are thus
//! at most min(message, lanes × R × segment) ([`Endpoint::held_bytes_of`]), however far the
//! root runs ahead. Nor can a blocking rank run ahead of its late child: its broadcast is
//! over only once every child acknowledged every segment, so in a program of blocking
//! broadcasts a rank holds for at most one broadcast per communicator (the next one); only
//! nonblocking ones posted ahead by its peers add more, each within that bound, and each
//! backed by a buffer the program itself gave its root. A late rank is waited for, no rank
//! fails for being ahead, and no back-pressure spans broadcasts (the window is each
//! broadcast's own), so broadcasts on different communicators posted in different orders
//! never wait for each other. The memory itself comes from the link's own allocation, which
//! fails with a named `TransportError::Memory` instead of aborting (`transport::limits`;
//! docs/scale.md, "Held segments").
//!
//! **The receiver enforces it.** A peer that ignores the window (faulty or hostile) is a
//! protocol error, not memory held: a segment of a broadcast not posted here must be one of
//! its lane's first R (the endpoint's window, [`Endpoint::with_window`]), a real segment of
//! the message its header announces, announced alike by every segment held for that
//! broadcast; a repeat of one held is dropped ([`Endpoint::route_data`], [`Endpoint::hold`]).
//! Of a posted broadcast, [`Bcast::place`] refuses a segment beyond the window of the last
//! credit this rank sent. Both look at indexes, so a duplicate or a retransmission of a
//! segment a correct parent sent is never refused.

use super::number::{comm_of, number, seq_of};
use super::{
    layout, Bcast, Config, DataHeader, EngineError, Expected, Message, Placement, Transmit,
};
use std::collections::{BTreeMap, VecDeque};
use std::ops::Range;

/// A message of a broadcast not posted yet, with its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Held {
    from: usize,
    message: Message,
    payload: Vec<u8>,
}

/// Where an arriving segment's payload goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Into broadcast `seq`'s buffer at `range`; then call [`Endpoint::handle_data`].
    Into { seq: u64, range: Range<usize> },
    /// A duplicate or a segment of a finished broadcast: read and drop the payload.
    Discard,
    /// Of a broadcast not posted yet: read the payload and give it to [`Endpoint::hold`].
    Hold,
}

/// One rank's broadcasts in flight, of every communicator.
#[derive(Debug)]
pub struct Endpoint {
    active: BTreeMap<u64, Bcast>,
    /// Per communicator, the highest broadcast number posted so far (every lower one of the
    /// communicator was posted before it); absent: none yet.
    posted: BTreeMap<u32, u64>,
    held: BTreeMap<u64, VecDeque<Held>>,
    held_bytes: usize,
    /// Broadcasts posted and finished so far ([`Endpoint::changes`]).
    changes: u64,
    /// R, the window every parent keeps (`Config::window`, agreed): the most segments per
    /// lane a peer may send of a broadcast not posted here.
    window: u32,
}

impl Default for Endpoint {
    fn default() -> Endpoint {
        Endpoint::with_window(Config::default().window)
    }
}

impl Endpoint {
    /// An endpoint whose broadcasts use the default window ([`Config`]).
    pub fn new() -> Endpoint {
        Endpoint::default()
    }

    /// An endpoint whose broadcasts keep a window of `window` segments (`Config::window`,
    /// the same at every rank): what it lets a peer send of a broadcast not posted here. A
    /// posted broadcast with a larger window raises it.
    pub fn with_window(window: u32) -> Endpoint {
        Endpoint {
            active: BTreeMap::new(),
            posted: BTreeMap::new(),
            held: BTreeMap::new(),
            held_bytes: 0,
            changes: 0,
            window: window.max(1),
        }
    }

    /// Sets the window its broadcasts keep ([`with_window`](Self::with_window)), before any
    /// is posted.
    pub fn set_window(&mut self, window: u32) {
        self.window = window.max(1);
    }

    /// Starts `bcast`, whose number must be above every one its communicator posted before,
    /// on its buffer `buf`, and delivers the messages that arrived early for it (held
    /// segments are copied into `buf`: the one copy a late rank pays).
    pub fn post(&mut self, bcast: Bcast, buf: &mut [u8], now: u64) -> Result<(), EngineError> {
        let seq = bcast.setup().seq;
        let posted = self.posted_on(comm_of(seq));
        if seq <= posted {
            return Err(EngineError::BadPlan(format!(
                "broadcast {} of communicator {} posted after its broadcast {}: sequence numbers must grow",
                seq_of(seq),
                comm_of(seq),
                seq_of(posted)
            )));
        }
        self.posted.insert(comm_of(seq), seq);
        self.window = self.window.max(bcast.window());
        self.active.insert(seq, bcast);
        self.changes += 1;
        let held = self.held.remove(&seq).unwrap_or_default();
        for h in held {
            self.held_bytes -= h.payload.len();
            self.deliver(now, h.from, h.message, h.payload, |_, range, payload| {
                copy_into(buf, range, payload)
            })?;
        }
        Ok(())
    }

    /// The highest broadcast number communicator `comm` posted (its number 0 when none).
    fn posted_on(&self, comm: u32) -> u64 {
        self.posted.get(&comm).copied().unwrap_or(number(comm, 0))
    }

    /// Whether broadcast `seq` is one its communicator has not posted yet here.
    fn is_later(&self, seq: u64) -> bool {
        seq > self.posted_on(comm_of(seq))
    }

    /// Forgets communicator `comm` (freed here, nothing of it in flight): its sequence numbers
    /// may start again at 1, for a new communicator given the same id (MPI reuses a context
    /// id once every member freed its communicator, after its broadcasts completed).
    /// Messages held for it stay: they are of broadcasts a new communicator with its id posts.
    pub fn forget(&mut self, comm: u32) {
        debug_assert!(self.active.keys().all(|&s| comm_of(s) != comm));
        self.posted.remove(&comm);
    }

    /// Whether a broadcast of communicator `comm` is in flight.
    pub fn runs_on(&self, comm: u32) -> bool {
        self.active
            .range(number(comm, 0)..=number(comm, u32::MAX))
            .next()
            .is_some()
    }

    /// The broadcast with sequence number `seq`, while it runs.
    pub fn get(&self, seq: u64) -> Option<&Bcast> {
        self.active.get(&seq)
    }

    /// The rail (NIC) `message` travels on: its lane's rail in its broadcast, 0 when the
    /// broadcast is not in flight here.
    pub fn rail_of(&self, message: &Message) -> usize {
        let lane = match *message {
            Message::Data(h) => h.lane,
            Message::Credit { lane, .. } | Message::Done { lane, .. } => lane,
        };
        self.get(message.seq())
            .map_or(0, |b| b.rail(usize::from(lane)))
    }

    /// Sequence numbers of the broadcasts in flight, oldest first.
    pub fn active(&self) -> impl Iterator<Item = u64> + '_ {
        self.active.keys().copied()
    }

    /// Whether nothing is in flight.
    pub fn is_idle(&self) -> bool {
        self.active.is_empty()
    }

    /// Whether broadcast `seq` is over at this rank.
    pub fn is_done(&self, seq: u64) -> bool {
        self.active.get(&seq).is_some_and(Bcast::is_done)
    }

    /// Whether some broadcast in flight is over here (its driver should finish it now rather
    /// than let a link wait for the network).
    pub fn any_done(&self) -> bool {
        self.active.values().any(Bcast::is_done)
    }

    /// Removes a finished (or failed) broadcast; messages for it are dropped from now on.
    pub fn finish(&mut self, seq: u64) -> Option<Bcast> {
        self.changes += 1;
        self.active.remove(&seq)
    }

    /// Broadcasts posted and finished so far: it changes whenever the set in flight does, so
    /// what is derived from that set ([`Endpoint::peers`]) holds until it changes.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// Bytes of payload held for broadcasts not posted yet.
    pub fn held_bytes(&self) -> usize {
        self.held_bytes
    }

    /// Bytes of payload held for broadcast `seq` (not posted yet): at most its message, and
    /// at most lanes × window × segment (the module's doc says why).
    pub fn held_bytes_of(&self, seq: u64) -> usize {
        self.held
            .get(&seq)
            .map_or(0, |h| h.iter().map(|m| m.payload.len()).sum())
    }

    /// Where the payload of a segment from `from` goes: the one landing decision every link
    /// and the simulator take when its header arrives. `Into` ranges are the header's length
    /// (the broadcast checked it); a segment to hold (of a broadcast not posted yet) longer
    /// than its own segment size is an error everywhere, never memory the sender chooses.
    pub fn route_data(&mut self, from: usize, h: &DataHeader) -> Result<Route, EngineError> {
        if self.is_later(h.seq) {
            return self.route_held(from, h);
        }
        let Some(b) = self.active.get_mut(&h.seq) else {
            return Ok(Route::Discard);
        };
        match b.place(from, h)? {
            Placement::Into(range) => Ok(Route::Into { seq: h.seq, range }),
            Placement::Discard => Ok(Route::Discard),
            Placement::Later => self.route_held(from, h),
        }
    }

    /// Whether a segment of a broadcast not posted here may be held: one of its message's
    /// segments (no longer than its segment size), within the window of its lane (a held
    /// segment returns no credit, so a parent that keeps to its window sends indexes 0 to
    /// R − 1 of each lane and then waits), announcing the broadcast as the segments held for
    /// it before did. A repeat of a segment held already is discarded. This only looks: a
    /// link may ask again for the same segment (shared memory's deferred records) and is
    /// answered alike, and what is held is counted by [`hold`](Self::hold).
    fn route_held(&self, from: usize, h: &DataHeader) -> Result<Route, EngineError> {
        let what = || {
            format!(
                "rank {from} sent segment {} of lane {} of broadcast {} of communicator {} \
                 before this rank posted it",
                h.index,
                h.lane,
                seq_of(h.seq),
                comm_of(h.seq)
            )
        };
        if h.len > h.segment {
            return Err(EngineError::Protocol(format!(
                "{} with {} bytes, longer than its {}-byte segments",
                what(),
                h.len,
                h.segment
            )));
        }
        let len = layout::segment_len(
            h.msize,
            u64::from(h.segment),
            usize::from(h.lanes),
            usize::from(h.lane),
            h.index,
        );
        if len != Some(u64::from(h.len)) {
            return Err(EngineError::Protocol(format!(
                "{}: {} bytes of a {}-byte message cut into {} lanes of {}-byte segments, \
                 which has no such segment",
                what(),
                h.len,
                h.msize,
                h.lanes,
                h.segment
            )));
        }
        if h.index >= self.window {
            return Err(EngineError::Protocol(format!(
                "{}: at least {} segments of that lane unacknowledged (this rank has \
                 acknowledged none), more than the window of {}; a held segment returns no \
                 credit, so it ignores the window",
                what(),
                u64::from(h.index) + 1,
                self.window
            )));
        }
        let held = self.held.get(&h.seq).into_iter().flatten();
        let mut data = held.filter_map(|m| match m.message {
            Message::Data(d) => Some((m.from, d)),
            _ => None,
        });
        if let Some((first_from, first)) = data.clone().next() {
            let shape = |d: &DataHeader| (d.root, d.msize, d.segment, d.lanes);
            if shape(&first) != shape(h) {
                return Err(EngineError::Protocol(format!(
                    "{} as root {}, {} bytes in {}-byte segments over {} lanes, but rank \
                     {first_from} sent it as root {}, {} bytes in {}-byte segments over {} \
                     lanes",
                    what(),
                    h.root,
                    h.msize,
                    h.segment,
                    h.lanes,
                    first.root,
                    first.msize,
                    first.segment,
                    first.lanes
                )));
            }
        }
        if data.any(|(f, d)| f == from && d.lane == h.lane && d.index == h.index) {
            return Ok(Route::Discard);
        }
        Ok(Route::Hold)
    }

    /// Lands a message whose payload is already in hand (a segment read while its broadcast
    /// was not posted, replayed when it is; the simulator's messages): a control message goes
    /// to its broadcast, a segment through [`route_data`](Self::route_data) to `copy` (given
    /// its broadcast, its range and the payload: [`copy_into`] that broadcast's buffer),
    /// to [`hold`](Self::hold), or nowhere; then it counts as landed.
    pub fn deliver<E: From<EngineError>>(
        &mut self,
        now: u64,
        from: usize,
        message: Message,
        payload: Vec<u8>,
        copy: impl FnOnce(u64, Range<usize>, &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let Message::Data(h) = message else {
            return Ok(self.handle_message(now, from, &message)?);
        };
        match self.route_data(from, &h)? {
            Route::Into { seq, range } => {
                copy(seq, range, &payload)?;
                self.handle_data(now, &h);
            }
            Route::Hold => self.hold(from, message, payload),
            Route::Discard => {}
        }
        Ok(())
    }

    /// Keeps a message (with its payload) of a broadcast not posted yet (one that is over
    /// here drops it; one that runs must get it by `route_data`/`handle_message` instead).
    /// A repeat is kept once: a segment held already from `from` (its lane and index) is
    /// dropped, a credit merges into one held from `from` for its lane (credits are
    /// cumulative), a repeated done is dropped; so per peer, broadcast and lane at most the
    /// window of segments ([`route_data`](Self::route_data) checked them), one credit and
    /// one done are held.
    pub fn hold(&mut self, from: usize, message: Message, payload: Vec<u8>) {
        if !self.is_later(message.seq()) {
            debug_assert!(!self.active.contains_key(&message.seq()));
            return;
        }
        let held = self.held.entry(message.seq()).or_default();
        for h in held.iter_mut().filter(|h| h.from == from) {
            match (&mut h.message, message) {
                (Message::Data(a), Message::Data(b)) if (a.lane, a.index) == (b.lane, b.index) => {
                    return;
                }
                (
                    Message::Credit { lane, consumed, .. },
                    Message::Credit {
                        lane: l,
                        consumed: c,
                        ..
                    },
                ) if *lane == l => {
                    *consumed = (*consumed).max(c);
                    return;
                }
                (Message::Done { lane, .. }, Message::Done { lane: l, .. }) if *lane == l => {
                    return;
                }
                _ => {}
            }
        }
        self.held_bytes += payload.len();
        held.push_back(Held {
            from,
            message,
            payload,
        });
    }

    /// The payload of a segment routed `Into` its buffer has fully landed.
    pub fn handle_data(&mut self, now: u64, h: &DataHeader) {
        if let Some(b) = self.active.get_mut(&h.seq) {
            b.handle_data(now, h);
        }
    }

    /// A control message (credit, done): to its broadcast, held if early, dropped if late.
    pub fn handle_message(
        &mut self,
        now: u64,
        from: usize,
        message: &Message,
    ) -> Result<(), EngineError> {
        let seq = message.seq();
        if self.is_later(seq) {
            self.hold(from, *message, Vec::new());
            return Ok(());
        }
        if let Some(b) = self.active.get_mut(&seq) {
            if b.handle_message(now, from, message)? == Placement::Later {
                self.hold(from, *message, Vec::new());
            }
        }
        Ok(())
    }

    /// The next message to send and the broadcast whose buffer holds its payload: the lowest
    /// number first (of one communicator the oldest broadcast, whose segments peers wait for
    /// longest; communicators by id: each broadcast's window bounds what it sends ahead, so
    /// a later one is never starved).
    pub fn poll_transmit(&mut self, now: u64) -> Option<(u64, Transmit)> {
        self.poll_transmit_to(now, &|_| true)
    }

    /// [`poll_transmit`](Self::poll_transmit) for the peers one link serves (`to`), when a
    /// rank reaches different peers over different links (shared memory on its host, the
    /// network beyond).
    pub fn poll_transmit_to(
        &mut self,
        now: u64,
        to: &dyn Fn(usize) -> bool,
    ) -> Option<(u64, Transmit)> {
        self.active
            .iter_mut()
            .find_map(|(&seq, b)| b.poll_transmit_to(now, to).map(|t| (seq, t)))
    }

    /// The segments this rank may receive next from the peers `from` accepts (those one link
    /// serves), over every broadcast in flight, oldest first: what a link that pre-posts
    /// receives or exposes memory (RDMA verbs) should expect. See [`Bcast::expected`].
    pub fn expected(&self, from: &dyn Fn(usize) -> bool) -> Vec<Expected> {
        self.active
            .values()
            .flat_map(Bcast::expected)
            .filter(|e| from(e.from))
            .collect()
    }

    /// Every rank a broadcast in flight waits for.
    pub fn waiting_for(&self) -> Vec<usize> {
        let mut ranks: Vec<usize> = self.active.values().flat_map(Bcast::waiting_for).collect();
        ranks.sort_unstable();
        ranks.dedup();
        ranks
    }

    /// Every rank the broadcasts in flight talk to.
    pub fn peers(&self) -> Vec<usize> {
        let mut ranks: Vec<usize> = self.active.values().flat_map(Bcast::peers).collect();
        ranks.sort_unstable();
        ranks.dedup();
        ranks
    }

    /// The earliest engine timer.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.active.values().filter_map(Bcast::poll_timeout).min()
    }

    /// Runs the engines' timers.
    pub fn handle_timeout(&mut self, now: u64) -> Result<(), EngineError> {
        self.active
            .values_mut()
            .try_for_each(|b| b.handle_timeout(now))
    }

    /// The state of every broadcast in flight, for a failure report.
    pub fn describe(&self) -> String {
        let posted: Vec<String> = self
            .posted
            .iter()
            .map(|(c, &s)| format!("{c}:{}", seq_of(s)))
            .collect();
        let mut out = format!(
            "endpoint: {} in flight, posted up to [{}] (communicator:sequence), {} bytes held for {} later broadcasts",
            self.active.len(),
            posted.join(" "),
            self.held_bytes,
            self.held.len()
        );
        for b in self.active.values() {
            out += "\n";
            out += &b.describe();
        }
        out
    }
}

/// Copies a landed `payload` into `buf` at `range`: the one fit check (a range beyond the
/// buffer or a payload of another length is an error, never a panic or a short copy).
pub fn copy_into(buf: &mut [u8], range: Range<usize>, payload: &[u8]) -> Result<(), EngineError> {
    match buf.get_mut(range.clone()) {
        Some(dst) if dst.len() == payload.len() => {
            dst.copy_from_slice(payload);
            Ok(())
        }
        _ => Err(EngineError::Protocol(format!(
            "a segment of {} bytes does not fit {range:?} of a {}-byte buffer",
            payload.len(),
            buf.len()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Config, Setup};
    use crate::plan::{self, TreeKind};
    use crate::topology::Topology;

    fn chain(n: usize) -> Vec<crate::plan::Lane> {
        plan::build(&Topology::single_switch(n), 0, &TreeKind::NaiveLinear, None)
            .unwrap()
            .lanes
    }

    fn bcast(me: usize, seq: u64, msize: u64) -> Bcast {
        let setup = Setup {
            seq,
            root: 0,
            msize,
            segment: 4,
            deep: false,
        };
        Bcast::new(me, &chain(3), setup, Config::default(), 0).unwrap()
    }

    /// The header of broadcast `seq`'s first 4-byte segment of `msize` bytes from root 0.
    fn first(seq: u64, msize: u64) -> DataHeader {
        DataHeader {
            seq,
            root: 0,
            msize,
            segment: 4,
            lanes: 1,
            lane: 0,
            index: 0,
            len: 4,
        }
    }

    /// Two broadcasts in flight on a chain 0 → 1 → 2, run by hand: rank 1 posts only the
    /// first at first; the root's segments of the second are held and replayed when rank 1
    /// posts it; both complete byte-exact.
    #[test]
    fn messages_of_a_later_broadcast_are_held_until_it_is_posted() {
        let msgs = BTreeMap::from([(1, b"0123456789".to_vec()), (2, b"abcdefgh".to_vec())]);
        let mut eps: Vec<Endpoint> = (0..3).map(|_| Endpoint::new()).collect();
        let mut bufs = buffers(&msgs);
        for r in 0..3 {
            for (&s, m) in &msgs {
                if r == 1 && s == 2 {
                    continue; // late
                }
                let b = bcast(r, s, m.len() as u64);
                eps[r].post(b, bufs[r].get_mut(&s).unwrap(), 0).unwrap();
            }
        }
        for round in 0..200 {
            exchange(&mut eps, &mut bufs);
            if round == 20 {
                assert!(eps[1].held_bytes() > 0, "the root ran ahead");
                let b = bcast(1, 2, msgs[&2].len() as u64);
                eps[1].post(b, bufs[1].get_mut(&2).unwrap(), 0).unwrap();
                assert_eq!(eps[1].held_bytes(), 0);
            }
        }
        for r in 0..3 {
            for (&s, m) in &msgs {
                assert!(eps[r].is_done(s), "rank {r} broadcast {s}");
                assert_eq!(&bufs[r][&s], m, "rank {r} broadcast {s}");
            }
        }
    }

    /// A root that runs ahead of a late rank (every broadcast posted at once, as nonblocking
    /// ones are) never makes it hold more of a broadcast than the window of its segments per
    /// lane: a held segment returns no credit, so its parent stops at the window. On the
    /// chain 0 → 1 → 2 with one lane and with two, window 3, 4-byte segments, sizes 0, 1,
    /// odd, within and beyond a window, not a multiple of the segment; rank 1 late (the root
    /// itself runs ahead) and rank 2 (rank 1 forwards, and cannot finish before its child
    /// posted: a blocking rank 1 could not run ahead). Nothing fails while the rank is late;
    /// once it posts, one broadcast at a time, every broadcast completes byte-exact at every
    /// rank and nothing stays held.
    #[test]
    fn a_late_rank_holds_at_most_a_window_per_lane_of_each_broadcast_run_ahead() {
        let window = 3;
        let config = Config {
            window,
            credit_every: 2,
            ..Config::default()
        };
        let sizes = [0, 1, 7, 12, 37, 203];
        for lanes_n in [1, 2] {
            for late in [1, 2] {
                let what = format!("{lanes_n} lanes, rank {late} late");
                let lanes: Vec<crate::plan::Lane> = (0..lanes_n).flat_map(|_| chain(3)).collect();
                let msgs: BTreeMap<u64, Vec<u8>> = sizes
                    .iter()
                    .enumerate()
                    .map(|(i, &len)| (i as u64 + 1, crate::testing::pattern(len, i)))
                    .collect();
                let bcast = |me: usize, seq: u64| {
                    let setup = Setup {
                        seq,
                        root: 0,
                        msize: msgs[&seq].len() as u64,
                        segment: 4,
                        deep: false,
                    };
                    Bcast::new(me, &lanes, setup, config, 0).unwrap()
                };
                // At most a window of 4-byte segments per lane, and never more than the message.
                let bound = |seq: u64| msgs[&seq].len().min(lanes_n * window as usize * 4);
                let total: usize = msgs.keys().map(|&s| bound(s)).sum();
                // The receivers enforce the same window: a parent that keeps it is never refused.
                let mut eps: Vec<Endpoint> =
                    (0..3).map(|_| Endpoint::with_window(window)).collect();
                let mut bufs = buffers(&msgs);
                for r in (0..3).filter(|&r| r != late) {
                    for &s in msgs.keys() {
                        eps[r]
                            .post(bcast(r, s), bufs[r].get_mut(&s).unwrap(), 0)
                            .unwrap();
                    }
                }
                let check = |eps: &[Endpoint], round: usize| {
                    for &s in msgs.keys() {
                        let held = eps[late].held_bytes_of(s);
                        assert!(
                            held <= bound(s),
                            "{what}, round {round}: {held} bytes of {s}"
                        );
                    }
                    assert!(eps[late].held_bytes() <= total, "{what}, round {round}");
                };
                for round in 0..100 {
                    exchange(&mut eps, &mut bufs);
                    check(&eps, round);
                }
                // The window is full for every broadcast, and stays so: waited for, not failed.
                assert_eq!(eps[late].held_bytes(), total, "{what}");
                for &s in msgs.keys().filter(|&&s| !msgs[&s].is_empty()) {
                    assert!(
                        !eps[late - 1].is_done(s),
                        "{what}: {s} over above the late rank"
                    );
                    if late == 2 {
                        assert!(eps[0].is_done(s), "{what}: the root ran ahead with {s}");
                    }
                }
                for &s in msgs.keys() {
                    eps[late]
                        .post(bcast(late, s), bufs[late].get_mut(&s).unwrap(), 0)
                        .unwrap();
                    for round in 0..10 {
                        exchange(&mut eps, &mut bufs);
                        check(&eps, round);
                    }
                }
                for round in 0..400 {
                    exchange(&mut eps, &mut bufs);
                    check(&eps, round);
                }
                for r in 0..3 {
                    for (&s, m) in &msgs {
                        assert!(eps[r].is_done(s), "{what}: rank {r} broadcast {s}");
                        assert_eq!(&bufs[r][&s], m, "{what}: rank {r} broadcast {s}");
                    }
                    assert_eq!(eps[r].held_bytes(), 0, "{what}: rank {r}");
                }
            }
        }
    }

    /// Rank 1's part of broadcast 1 on `lanes_n` chains 0 → 1 → 2 (parent: rank 0 in every
    /// lane): `msize` bytes in 4-byte segments, window 3, a credit every 2 segments.
    fn windowed(lanes_n: usize, msize: u64) -> Bcast {
        let lanes: Vec<crate::plan::Lane> = (0..lanes_n).flat_map(|_| chain(3)).collect();
        let setup = Setup {
            seq: 1,
            root: 0,
            msize,
            segment: 4,
            deep: false,
        };
        let config = Config {
            window: 3,
            credit_every: 2,
            ..Config::default()
        };
        Bcast::new(1, &lanes, setup, config, 0).unwrap()
    }

    /// Segment `index` of `lane` of broadcast 1 (root 0, `lanes` lanes, 4-byte segments).
    fn four_bytes(msize: u64, lanes: u16, lane: u16, index: u32) -> DataHeader {
        DataHeader {
            seq: 1,
            root: 0,
            msize,
            segment: 4,
            lanes,
            lane,
            index,
            len: 4,
        }
    }

    /// A faulty or hostile parent (rank 0, faked by hand) that ignores the window of a
    /// broadcast rank 1 has not posted: rank 1 holds at most the window (3) of each lane's
    /// segments; a repeat of one held already is dropped, not held twice; the fourth segment
    /// of a lane is a protocol error naming the peer, the count and the window, never memory
    /// held. Repeated credits and dones are held once. One lane and two.
    #[test]
    fn a_peer_that_sends_beyond_the_window_of_a_broadcast_not_posted_is_refused() {
        for lanes_n in [1u16, 2] {
            let msize = 24 * u64::from(lanes_n);
            let segment = |lane: u16, index: u32| four_bytes(msize, lanes_n, lane, index);
            let mut ep = Endpoint::with_window(3);
            let ignore = |_, _, _: &[u8]| Ok::<(), EngineError>(());
            for round in 0..3 {
                for lane in 0..lanes_n {
                    for index in 0..3 {
                        let h = segment(lane, index);
                        let want = if round == 0 {
                            Route::Hold
                        } else {
                            Route::Discard
                        };
                        assert_eq!(ep.route_data(0, &h).unwrap(), want, "lanes {lanes_n}");
                        ep.deliver(0, 0, Message::Data(h), vec![7; 4], ignore)
                            .unwrap();
                        // A link that delivers a repeat anyway (`hold` itself) keeps one.
                        ep.hold(0, Message::Data(h), vec![7; 4]);
                    }
                }
                for lane in 0..lanes_n {
                    for _ in 0..4 {
                        let credit = Message::Credit {
                            seq: 1,
                            lane,
                            consumed: 0,
                        };
                        ep.handle_message(0, 2, &credit).unwrap();
                        ep.handle_message(0, 2, &Message::Done { seq: 1, lane })
                            .unwrap();
                    }
                }
            }
            let lanes = usize::from(lanes_n);
            assert_eq!(ep.held_bytes(), lanes * 3 * 4, "lanes {lanes_n}");
            assert_eq!(ep.held[&1].len(), lanes * (3 + 2), "lanes {lanes_n}");
            for lane in 0..lanes_n {
                let h = segment(lane, 3);
                let e = ep.route_data(0, &h).unwrap_err().to_string();
                assert!(
                    e.contains("rank 0 sent segment 3 of lane")
                        && e.contains("at least 4 segments")
                        && e.contains("window of 3"),
                    "{e}"
                );
                assert!(ep
                    .deliver(0, 0, Message::Data(h), vec![7; 4], ignore)
                    .is_err());
            }
            assert_eq!(ep.held_bytes(), lanes * 3 * 4, "nothing more held");
            // Not a segment of the message it announces, or another shape of the broadcast
            // than the segments held: refused too.
            let beyond = DataHeader {
                index: 0,
                lane: lanes_n,
                ..segment(0, 0)
            };
            assert!(ep.route_data(0, &beyond).is_err());
            let other = DataHeader {
                msize: msize + 4,
                ..segment(0, 0)
            };
            let e = ep.route_data(1, &other).unwrap_err().to_string();
            assert!(e.contains("but rank 0 sent it as root 0"), "{e}");
            // Posted, what was held lands once, byte for byte, credited in turn.
            let mut buf = vec![0u8; msize as usize];
            ep.post(windowed(lanes_n.into(), msize), &mut buf, 0)
                .unwrap();
            assert_eq!(ep.held_bytes(), 0);
            let per_lane = (msize / u64::from(lanes_n)) as usize;
            for l in 0..lanes {
                assert_eq!(
                    buf[l * per_lane..l * per_lane + 12],
                    [7; 12],
                    "lanes {lanes_n}"
                );
            }
        }
    }

    /// A faulty or hostile parent (rank 0, faked by hand) that ignores the credits of a
    /// broadcast rank 1 has posted: segments up to the window beyond the last credit rank 1
    /// sent land (a repeat is dropped, not an error), the next is a protocol error naming
    /// the peer, the count and the window, and it fails the broadcast (nothing more is sent
    /// or expected). One lane and two.
    #[test]
    fn a_peer_that_sends_beyond_the_window_of_a_posted_broadcast_fails_it() {
        for lanes_n in [1u16, 2] {
            let msize = 40 * u64::from(lanes_n);
            let segment = |lane: u16, index: u32| four_bytes(msize, lanes_n, lane, index);
            let mut ep = Endpoint::with_window(3);
            let mut buf = vec![0u8; msize as usize];
            ep.post(windowed(lanes_n.into(), msize), &mut buf, 0)
                .unwrap();
            let land = |ep: &mut Endpoint, buf: &mut [u8], h: DataHeader| {
                ep.deliver(
                    0,
                    0,
                    Message::Data(h),
                    vec![h.index as u8 + 1; 4],
                    |_, r, p| copy_into(buf, r, p),
                )
            };
            let last = lanes_n - 1;
            // Lane 0 (and 1) within the window: 0, 1 and 2 land; two of them are credited.
            for lane in 0..lanes_n {
                for index in 0..3 {
                    land(&mut ep, &mut buf, segment(lane, index)).unwrap();
                }
            }
            // (Rank 1 also forwards the segments to rank 2.)
            let credits: Vec<Message> = std::iter::from_fn(|| ep.poll_transmit(0))
                .map(|(_, t)| t.message)
                .filter(|m| matches!(m, Message::Credit { .. }))
                .collect();
            assert_eq!(credits.len(), usize::from(lanes_n), "{credits:?}");
            // Acknowledged 2: segments up to 4 may come (4 before 3: in any order), a repeat
            // of 0 is dropped; 5 is a fourth unacknowledged one.
            for index in [4, 0] {
                land(&mut ep, &mut buf, segment(last, index)).unwrap();
            }
            let e = land(&mut ep, &mut buf, segment(last, 5))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!("rank 0 sent segment 5 of lane {last}"))
                    && e.contains("had acknowledged 2")
                    && e.contains("at least 4 segments")
                    && e.contains("window of 3"),
                "{e}"
            );
            assert!(!ep.is_done(1) && ep.poll_transmit(0).is_none());
            assert!(ep.expected(&|_| true).is_empty(), "failed");
        }
    }

    /// Each of 3 ranks' buffers for `msgs` (broadcast number → message): the root's hold the
    /// messages, the others zeros.
    fn buffers(msgs: &BTreeMap<u64, Vec<u8>>) -> Vec<BTreeMap<u64, Vec<u8>>> {
        (0..3)
            .map(|r| {
                msgs.iter()
                    .map(|(&n, m)| (n, if r == 0 { m.clone() } else { vec![0; m.len()] }))
                    .collect()
            })
            .collect()
    }

    /// One round by hand: every rank's messages out, then each delivered to its rank, its
    /// payload landing in that rank's buffer of its broadcast.
    fn exchange(eps: &mut [Endpoint], bufs: &mut [BTreeMap<u64, Vec<u8>>]) {
        let mut wire = Vec::new();
        for (r, ep) in eps.iter_mut().enumerate() {
            while let Some((seq, t)) = ep.poll_transmit(0) {
                let payload = bufs[r][&seq][t.payload.clone()].to_vec();
                wire.push((r, t.to, t.message, payload));
            }
        }
        for (from, to, message, payload) in wire {
            let bufs = &mut bufs[to];
            eps[to]
                .deliver(0, from, message, payload, |seq, range, p| {
                    copy_into(bufs.get_mut(&seq).unwrap(), range, p)
                })
                .unwrap();
        }
    }

    /// Runs `order[r]` (broadcast numbers, each with its message `msgs[&n]`) at every rank of
    /// the chain 0 → 1 → 2 by hand, rank r posting its list in its own order one broadcast
    /// per few rounds, and checks every broadcast byte-exact everywhere.
    fn run_interleaved(msgs: &BTreeMap<u64, Vec<u8>>, order: [Vec<u64>; 3]) {
        let mut eps: Vec<Endpoint> = (0..3).map(|_| Endpoint::new()).collect();
        let mut bufs = buffers(msgs);
        let mut next = [0usize; 3];
        for round in 0..400 {
            for r in 0..3 {
                // Rank r posts its next broadcast every (r + 2) rounds: the ranks drift apart.
                if round % (r + 2) == 0 && next[r] < order[r].len() {
                    let n = order[r][next[r]];
                    next[r] += 1;
                    let b = bcast(r, n, msgs[&n].len() as u64);
                    eps[r].post(b, bufs[r].get_mut(&n).unwrap(), 0).unwrap();
                }
            }
            exchange(&mut eps, &mut bufs);
        }
        for r in 0..3 {
            for (&n, m) in msgs {
                assert!(eps[r].is_done(n), "rank {r} broadcast {n:#x}");
                assert_eq!(&bufs[r][&n], m, "rank {r} broadcast {n:#x}");
            }
            assert_eq!(eps[r].held_bytes(), 0);
        }
    }

    /// Sequence numbers grow per communicator: broadcasts of communicators 0, 1 and 7 are
    /// posted in three different interleavings at the three ranks (each communicator's own
    /// in order), with the same low sequence numbers on every communicator; whatever arrives
    /// for a broadcast not posted yet on its communicator is held, and all complete
    /// byte-exact.
    #[test]
    fn communicators_post_in_any_interleaving_and_each_keeps_its_own_sequence() {
        let mut msgs = BTreeMap::new();
        for (i, (comm, seq)) in [(0, 1), (0, 2), (1, 1), (1, 2), (1, 3), (7, 1)]
            .into_iter()
            .enumerate()
        {
            let len = [10, 0, 1, 13, 8, 21][i];
            let m: Vec<u8> = (0..len).map(|b| (b * 7 + i * 31 + 1) as u8).collect();
            msgs.insert(number(comm, seq), m);
        }
        let n = |c, s| number(c, s);
        run_interleaved(
            &msgs,
            [
                vec![n(0, 1), n(1, 1), n(0, 2), n(1, 2), n(7, 1), n(1, 3)],
                vec![n(7, 1), n(1, 1), n(1, 2), n(1, 3), n(0, 1), n(0, 2)],
                vec![n(1, 1), n(1, 2), n(0, 1), n(7, 1), n(0, 2), n(1, 3)],
            ],
        );
    }

    #[test]
    fn each_communicator_checks_its_own_order_and_a_forgotten_one_starts_again() {
        let mut ep = Endpoint::new();
        let mut buf = [0u8; 8];
        ep.post(bcast(1, number(0, 3), 8), &mut buf, 0).unwrap();
        // Another communicator starts at 1, below communicator 0's 3.
        ep.post(bcast(1, number(2, 1), 8), &mut buf, 0).unwrap();
        let e = ep
            .post(bcast(1, number(2, 1), 8), &mut buf, 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("broadcast 1 of communicator 2"), "{e}");
        assert!(ep.post(bcast(1, number(0, 2), 8), &mut buf, 0).is_err());
        assert!(ep.runs_on(2) && ep.runs_on(0) && !ep.runs_on(1));
        let h = first(number(2, 1), 8);
        // Communicator 5 has posted nothing: its broadcast 1 is held; communicator 0's 1 is
        // over here.
        let of = |seq| DataHeader { seq, ..h };
        assert_eq!(ep.route_data(0, &of(number(5, 1))).unwrap(), Route::Hold);
        assert_eq!(ep.route_data(0, &of(number(0, 1))).unwrap(), Route::Discard);
        assert!(ep.describe().contains("0:3 2:1"), "{}", ep.describe());
        // Communicator 2 finishes and is forgotten: a new one with its id starts at 1 again,
        // and what arrives for it before it posts is held, not dropped.
        ep.finish(number(2, 1));
        assert!(!ep.runs_on(2));
        assert_eq!(ep.route_data(0, &of(number(2, 1))).unwrap(), Route::Discard);
        ep.forget(2);
        ep.deliver(
            0,
            0,
            Message::Data(of(number(2, 1))),
            vec![9; 4],
            |_, _, _| Ok::<(), EngineError>(()),
        )
        .unwrap();
        assert_eq!(ep.held_bytes(), 4);
        let mut again = [0u8; 8];
        ep.post(bcast(1, number(2, 1), 8), &mut again, 0).unwrap();
        assert_eq!(again, [9, 9, 9, 9, 0, 0, 0, 0]);
    }

    #[test]
    fn sequence_numbers_must_grow_and_finished_broadcasts_drop_their_messages() {
        let mut ep = Endpoint::new();
        let mut buf = [0u8; 8];
        ep.post(bcast(1, 3, 8), &mut buf, 0).unwrap();
        assert!(ep.post(bcast(1, 2, 8), &mut buf, 0).is_err());
        ep.finish(3);
        let h = first(3, 8);
        assert_eq!(ep.route_data(0, &h).unwrap(), Route::Discard);
        let later = DataHeader { seq: 9, ..h };
        assert_eq!(ep.route_data(0, &later).unwrap(), Route::Hold);
    }

    /// The one landing decision for every link: a segment to hold that is longer than its
    /// own segment size is an error (never memory the sender chooses), and a payload that
    /// does not fit where it lands is an error, never a panic or a short copy.
    #[test]
    fn an_oversized_held_segment_and_a_payload_that_does_not_fit_are_errors() {
        let mut ep = Endpoint::new();
        let mut buf = [0u8; 8];
        ep.post(bcast(1, 1, 8), &mut buf, 0).unwrap();
        let h = DataHeader {
            len: 1 << 30,
            ..first(2, 1 << 30)
        };
        let e = ep.route_data(0, &h).unwrap_err().to_string();
        assert!(e.contains("longer than its 4-byte segments"), "{e}");
        assert!(copy_into(&mut buf, 6..10, &[1; 4]).is_err());
        assert!(copy_into(&mut buf, 0..4, &[1; 3]).is_err());
        copy_into(&mut buf, 4..8, &[7; 4]).unwrap();
        assert_eq!(buf, [0, 0, 0, 0, 7, 7, 7, 7]);
        // A whole held payload lands through `deliver` once its broadcast is posted.
        let d = DataHeader {
            seq: 2,
            msize: 8,
            len: 4,
            ..h
        };
        let mut out: Vec<(u64, Range<usize>)> = Vec::new();
        ep.deliver(0, 0, Message::Data(d), vec![5; 4], |seq, range, _| {
            out.push((seq, range));
            Ok::<(), EngineError>(())
        })
        .unwrap();
        assert!(out.is_empty(), "held, not landed");
        assert_eq!(ep.held_bytes(), 4);
        let mut buf2 = [0u8; 8];
        ep.post(bcast(1, 2, 8), &mut buf2, 0).unwrap();
        assert_eq!(ep.held_bytes(), 0);
        assert_eq!(buf2, [5, 5, 5, 5, 0, 0, 0, 0]);
    }
}
