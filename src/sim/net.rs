//! The simulated network: ranks on a topology's machines, each running the real
//! [`Endpoint`], and toward every peer whose path is lossy the lossy-path adapter raw
//! Ethernet runs ([`reliable::Lossy`]: per-peer sequence numbers, selective
//! acknowledgements, RTO, [`Peers::poll_send`](reliable::Peers::poll_send)'s round robin
//! between peers, the [`Pacer`](reliable::Pacer), heartbeats and liveness), one per rank as
//! raw Ethernet runs one per NIC.
//!
//! A message from rank a to rank b crosses the directed edges of `Topology::path(a, b)`, one
//! [`SimLink`] each (on a topology with rails, `Topology::path_on` of the rail its lane runs
//! on, [`SimNet::rails`]: rails are edges like any other) (store and forward: each edge
//! delays, loses, duplicates and reorders on its own). On a lossy path each engine message is
//! one frame of the adapter (the simulator does not cut segments into MTU-sized frames) and
//! carries the acknowledgement of what came the other way; bare acknowledgements go when
//! nothing else does. Broadcasts are posted at chosen virtual times, several per rank, so ranks
//! can be late and broadcasts overlap. Everything is seeded and ordered (`BTreeMap`), so a run
//! is reproducible.

use super::{LinkModel, SimLink, Through};
use crate::engine::reliable::{self, Accept, Frame, Lossy, Piece};
use crate::engine::{self, Bcast, Endpoint, EngineError, Message, Setup};
use crate::model::Profile;
use crate::plan::Lane;
use crate::topology::{DirEdge, Topology};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::Arc;

/// Bytes of header counted for every message on an edge with a finite rate.
pub const HEADER_BYTES: usize = 40;

/// What one frame of the lossy adapter costs its pacer: a numbered message counts as one
/// Ethernet frame (1500 bytes), as raw Ethernet charges each of its frames.
const PACED_FRAME_BYTES: u64 = 1500;

/// In [`Hop::part`]: this share of a message is not its last (it is not delivered).
const NOT_LAST: u32 = 1 << 31;

/// What travels between ranks.
#[derive(Debug, Clone)]
enum Packet {
    /// An engine message and its payload, on a loss-free path.
    Bare { message: Message, payload: Vec<u8> },
    /// A frame of the lossy adapter ([`reliable::Frame`]: a numbered message or heartbeat,
    /// or a bare acknowledgement) and its payload.
    Frame { frame: Frame, payload: Vec<u8> },
}

impl Packet {
    fn message(&self) -> Option<&Message> {
        match self {
            Packet::Bare { message, .. }
            | Packet::Frame {
                frame:
                    Frame {
                        piece: Some(Piece::Message { message, .. }),
                        ..
                    },
                ..
            } => Some(message),
            Packet::Frame { .. } => None,
        }
    }

    /// Payload bytes (counted from the header: without payloads the vector is empty).
    fn payload_len(&self) -> usize {
        match self.message() {
            Some(Message::Data(h)) => h.len as usize,
            _ => 0,
        }
    }

    fn bytes(&self) -> usize {
        HEADER_BYTES + self.payload_len()
    }

    fn is_data(&self) -> bool {
        matches!(self.message(), Some(Message::Data(_)))
    }
}

/// A packet on its way: it is on edge `hop` of `path` (from `from` to `to`); its first byte
/// reaches the far end of that edge at `head` (cut-through: the next edge may start then),
/// its last at `tail`. The packet itself stays in [`Packets`] from its first edge to its
/// delivery: only this small record moves from edge to edge.
#[derive(Debug, Clone)]
struct Hop {
    from: usize,
    to: usize,
    hop: usize,
    head: u64,
    tail: u64,
    path: Arc<[DirEdge]>,
    packet: u32,
    /// 0: the whole message. Otherwise this hop carries only a share of the message's
    /// payload, this many bytes ([`NOT_LAST`] set on every share but the last), as a shared
    /// port sends it ([`SimNet::shared_port`]).
    part: u32,
}

/// The packets in flight, each held once however many edges it crosses; a duplicating edge
/// adds a reference.
#[derive(Debug, Default)]
struct Packets {
    /// (packet, copies in flight).
    slots: Vec<Option<(Packet, u32)>>,
    free: Vec<u32>,
}

impl Packets {
    fn insert(&mut self, packet: Packet) -> u32 {
        match self.free.pop() {
            Some(id) => {
                self.slots[id as usize] = Some((packet, 1));
                id
            }
            None => {
                self.slots.push(Some((packet, 1)));
                (self.slots.len() - 1) as u32
            }
        }
    }

    fn get(&self, id: u32) -> &Packet {
        &self.slots[id as usize]
            .as_ref()
            .expect("a packet in flight")
            .0
    }

    /// Copies in flight went from 1 to `copies` (0: lost, 2: duplicated).
    fn copies(&mut self, id: u32, copies: usize) {
        let slot = self.slots[id as usize]
            .as_mut()
            .expect("a packet in flight");
        slot.1 = slot.1 + copies as u32 - 1;
        if slot.1 == 0 {
            self.slots[id as usize] = None;
            self.free.push(id);
        }
    }

    /// One copy arrived: the packet (the last copy takes it out).
    fn take(&mut self, id: u32) -> Packet {
        let slot = self.slots[id as usize]
            .as_mut()
            .expect("a packet in flight");
        if slot.1 > 1 {
            slot.1 -= 1;
            return slot.0.clone();
        }
        self.free.push(id);
        self.slots[id as usize]
            .take()
            .expect("a packet in flight")
            .0
    }
}

/// Something due at a virtual time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// Posts are due.
    Post,
    /// A message may have reached the far end of this edge.
    Arrival(u32),
    /// A timer of this rank may be due.
    Timer(u32),
}

/// How a rank's simulation ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Every broadcast it posted completed.
    Done,
    /// A broadcast failed here; the rank stopped.
    Failed(EngineError),
    /// A peer its broadcasts waited for left a frame unacknowledged for the liveness limit
    /// ([`SimNet::liveness`]); the rank stopped, as raw Ethernet's link fails then.
    PeerGone { peer: usize, silent_ns: u64 },
    /// The rank was killed: it neither sent nor received.
    Dead,
}

/// What the ranks put on the network (monotonic counters over the whole run).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Engine messages the endpoints handed out.
    pub messages: u64,
    /// Engine messages put on the network, retransmissions included (heartbeats not).
    pub sends: u64,
    /// Of these, retransmissions.
    pub retransmits: u64,
    /// Bare acknowledgements put on the network (most ride on frames going the other way).
    pub acks: u64,
    /// Heartbeats put on the network.
    pub heartbeats: u64,
    /// Retransmission timer expiries.
    pub timeouts: u64,
}

#[derive(Debug)]
struct Rank {
    endpoint: Endpoint,
    bufs: BTreeMap<u64, Vec<u8>>,
    /// The lossy-path adapter toward the peers whose path is lossy (made at the first).
    lossy: Option<Lossy>,
    /// Broadcasts posted and not complete yet, and posts still scheduled.
    open: usize,
    dead: bool,
    failed: Option<EngineError>,
    /// A peer found gone (its rank, how long it was silent).
    gone: Option<(usize, u64)>,
    /// Sequence number → when this rank's part of that broadcast was over.
    finished: BTreeMap<u64, u64>,
    /// Sequence number → payload bytes landed so far (the root counts as holding all).
    landed: BTreeMap<u64, u64>,
    /// Sequence number → when the whole message had landed here.
    holds: BTreeMap<u64, u64>,
    /// When the earliest timer event scheduled for this rank is due.
    timer_at: Option<u64>,
    /// Paths to the first few peers this rank sent to (a tree's rank talks to its parent and
    /// children): found beside the rank, without hashing into the network's table.
    routes: Vec<(PeerRail, Arc<[DirEdge]>)>,
}

/// A route's destination rank and rail.
type PeerRail = (usize, usize);

impl Rank {
    fn runs(&self) -> bool {
        !self.dead && self.failed.is_none() && self.gone.is_none()
    }
}

/// A broadcast to post at a rank at a virtual time.
#[derive(Debug)]
struct Post {
    rank: usize,
    lanes: Arc<[Lane]>,
    setup: Setup,
}

/// When one sender's data used one directed edge: from the start of its first message to the
/// end of its last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    pub edge: DirEdge,
    pub sender: usize,
    pub first: u64,
    pub last: u64,
}

/// The senders whose data crossed one edge, in order of first use. Consecutive messages on an
/// edge mostly come from one sender, so the last one is checked first (this is on the
/// simulator's hot path); the index serves the rest.
#[derive(Debug, Clone, Default)]
struct EdgeFlows {
    /// (sender, start of its first data message here, end of its last).
    list: Vec<(usize, u64, u64)>,
    index: HashMap<usize, usize>,
}

impl EdgeFlows {
    fn record(&mut self, sender: usize, start: u64, end: u64) {
        if let Some(last) = self.list.last_mut().filter(|f| f.0 == sender) {
            last.2 = end;
            return;
        }
        match self.index.get(&sender) {
            Some(&i) => self.list[i].2 = end,
            None => {
                self.index.insert(sender, self.list.len());
                self.list.push((sender, start, end));
            }
        }
    }

    /// By sender.
    fn sorted(&self) -> impl Iterator<Item = (usize, u64, u64)> {
        let mut list = self.list.clone();
        list.sort_unstable();
        list.into_iter()
    }
}

/// Ranks, links and a virtual clock.
#[derive(Debug)]
pub struct SimNet {
    topology: Topology,
    /// One per directed edge (`DirEdge.0`).
    links: Vec<SimLink<Hop>>,
    packets: Packets,
    ranks: Vec<Rank>,
    engine: engine::Config,
    reliable: reliable::Config,
    reliable_everywhere: bool,
    /// The adapter's liveness limit (ns); `None`: the engine's idle timeout.
    liveness: Option<u64>,
    seed: u64,
    /// (time, order) → post.
    posts: BTreeMap<(u64, u64), Post>,
    /// Sequence number → the root's message.
    messages: BTreeMap<u64, Vec<u8>>,
    now: u64,
    stats: Stats,
    /// Events handled, and virtual time passed, before the run is declared stuck.
    max_events: u64,
    max_time: u64,
    /// Seed 003 §4.2's L(m) and g(m): a data message occupies its sender's uplink for at
    /// least g(m) and its last byte arrives L(m) after leaving the last edge.
    profile: Option<Profile>,
    /// Whether messages carry their bytes (off: timing only, nothing is copied or checked).
    payloads: bool,
    /// (time, order, event), earliest first.
    events: BinaryHeap<Reverse<(u64, u64, Event)>>,
    order: u64,
    /// Paths between the pairs of ranks that talked, per rail, computed once.
    paths: HashMap<(usize, usize, usize), Arc<[DirEdge]>>,
    /// The rail of each lane (`Plan::rails`); empty: every lane on rail 0.
    rails: Vec<usize>,
    /// Per edge: sender → (start of its first data message there, end of its last).
    flows: Vec<EdgeFlows>,
    /// Ranks that run and have broadcasts open.
    busy_ranks: usize,
    /// Edges that can lose messages (none: no pair is numbered, no path is looked at).
    lossy_links: usize,
    /// The quantum (payload bytes) of a sender's port shared round robin between its
    /// destinations ([`SimNet::shared_port`]); `None`: one message after another.
    shared_port: Option<u32>,
    /// First hops of the rank being flushed, when its port is shared (`batching`); the
    /// vector is kept between flushes so that it allocates once.
    batch: Vec<Hop>,
    batching: bool,
}

impl SimNet {
    /// Rank r on machine r of `topology`; every edge behaves as `model` (change single edges
    /// with [`SimNet::set_link`]).
    pub fn new(topology: &Topology, model: LinkModel, seed: u64) -> SimNet {
        let links = (0..topology.edge_count())
            .map(|e| {
                SimLink::new(
                    model,
                    seed ^ (e as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                )
            })
            .collect();
        let ranks = (0..topology.size())
            .map(|_| Rank {
                endpoint: Endpoint::new(),
                bufs: BTreeMap::new(),
                lossy: None,
                open: 0,
                dead: false,
                failed: None,
                gone: None,
                finished: BTreeMap::new(),
                landed: BTreeMap::new(),
                holds: BTreeMap::new(),
                timer_at: None,
                routes: Vec::new(),
            })
            .collect();
        let edges = topology.edge_count();
        SimNet {
            topology: topology.clone(),
            links,
            packets: Packets::default(),
            ranks,
            engine: engine::Config::default(),
            reliable: reliable::Config::default(),
            reliable_everywhere: false,
            liveness: None,
            seed,
            posts: BTreeMap::new(),
            messages: BTreeMap::new(),
            now: 0,
            stats: Stats::default(),
            max_events: 20_000_000,
            max_time: 3_600_000_000_000,
            profile: None,
            payloads: true,
            events: BinaryHeap::new(),
            order: 0,
            paths: HashMap::new(),
            rails: Vec::new(),
            flows: vec![EdgeFlows::default(); edges],
            busy_ranks: 0,
            lossy_links: if model.is_lossy() { edges } else { 0 },
            shared_port: None,
            batch: Vec::new(),
            batching: false,
        }
    }

    /// Lane l of every broadcast on rail `rails[l]` (the plan's `Plan::rails`): its data,
    /// credits and done messages cross `Topology::path_on(rail, …)`, as the TCP link sends
    /// them through NIC `rail`. Messages numbered for reliability (lossy paths) and their
    /// acknowledgements stay on rail 0, one ordered path per pair, as raw Ethernet's
    /// reliability runs per peer. A rail the topology lacks falls back to rail 0.
    pub fn rails(&mut self, rails: Vec<usize>) -> &mut SimNet {
        self.rails = rails;
        self
    }

    /// Prices messages with seed 003 §4.2's extended LogP model (`profile`): a data message
    /// of m bytes occupies its sender's uplink for g(m) (or its wire time, if longer: the
    /// 1-port model, one message after another) and its last byte arrives L(m) after it left
    /// the last edge. Other edges and control messages take their wire time.
    pub fn profile(&mut self, profile: Profile) -> &mut SimNet {
        self.profile = Some(profile);
        self
    }

    /// A sender's port is shared between its destinations, as a TCP sender's connections
    /// share its NIC: when one round of a rank's sends holds data messages larger than
    /// `quantum` bytes for two or more destinations, the port serves the destinations round
    /// robin, `quantum` payload bytes per turn (the kernel's 64 KiB GSO packets), instead of
    /// one whole message after another. Each share crosses the edges on its own; a message
    /// is delivered with its last share. Messages of one destination stay in order, and
    /// what reached the port in earlier rounds goes first. Only on loss-free paths (bare
    /// messages); without it (the default) the port is seed 001's 1-port model.
    pub fn shared_port(&mut self, quantum: u32) -> &mut SimNet {
        self.shared_port = Some(quantum.clamp(1, NOT_LAST - 1));
        self
    }

    /// Timing only: messages carry no bytes and buffers are not kept, so memory does not grow
    /// with ranks × message size (the engine runs all the same; data is not checked: the
    /// tests check it with payloads on). Every rank must post before anything arrives for
    /// that broadcast (a held segment has no bytes to replay).
    pub fn without_payloads(&mut self) -> &mut SimNet {
        self.payloads = false;
        self
    }

    /// Raises the number of events after which the run is declared stuck.
    pub fn max_events(&mut self, events: u64) -> &mut SimNet {
        self.max_events = events;
        self
    }

    /// Raises the virtual time after which the run is declared stuck (an hour unless set).
    pub fn max_time(&mut self, ns: u64) -> &mut SimNet {
        self.max_time = ns;
        self
    }

    /// Every rank's engine tuning.
    pub fn engine_config(&mut self, config: engine::Config) -> &mut SimNet {
        self.engine = config;
        for rank in &mut self.ranks {
            rank.endpoint.set_window(config.window);
        }
        self
    }

    /// The reliability's tuning, for every pair that uses it.
    pub fn reliable_config(&mut self, config: reliable::Config) -> &mut SimNet {
        self.reliable = config;
        self
    }

    /// The lossy adapter's liveness limit (ns): a peer a broadcast waits for is gone when a
    /// frame to it stays unacknowledged this long, and a quiet one gets a heartbeat every
    /// quarter of it (at least 10 ms). Unless set, the engine's idle timeout.
    pub fn liveness(&mut self, ns: u64) -> &mut SimNet {
        self.liveness = Some(ns);
        self
    }

    /// Runs the reliability between every pair of ranks, lossy path or not (as raw
    /// Ethernet does).
    pub fn reliable_everywhere(&mut self) -> &mut SimNet {
        self.reliable_everywhere = true;
        self
    }

    pub fn set_link(&mut self, edge: DirEdge, model: LinkModel) -> &mut SimNet {
        let link = &mut self.links[edge.0 as usize];
        self.lossy_links -= usize::from(link.model().is_lossy());
        self.lossy_links += usize::from(model.is_lossy());
        link.set_model(model);
        self
    }

    /// Kills `rank` before anything runs: it neither sends nor receives.
    pub fn kill(&mut self, rank: usize) -> &mut SimNet {
        self.ranks[rank].dead = true;
        self
    }

    /// Posts broadcast `setup` over `lanes` at `rank` at virtual time `at`. The root's buffer
    /// holds a pattern seeded by the network's seed and the sequence number
    /// ([`SimNet::message`]), every other rank's buffer 0xEE bytes. A rank must post its
    /// broadcasts in sequence-number order, and at no earlier time than the one before.
    pub fn post(&mut self, rank: usize, at: u64, lanes: &[Lane], setup: Setup) -> &mut SimNet {
        self.post_shared(rank, at, lanes.into(), setup)
    }

    /// [`SimNet::post`] with lanes shared between ranks (one copy for all of them).
    pub fn post_shared(
        &mut self,
        rank: usize,
        at: u64,
        lanes: Arc<[Lane]>,
        setup: Setup,
    ) -> &mut SimNet {
        if self.payloads {
            let seed = self.seed ^ setup.seq.wrapping_mul(0xD1B5_4A32_D192_ED03);
            self.messages.entry(setup.seq).or_insert_with(|| {
                let mut rng = ChaCha8Rng::seed_from_u64(seed);
                (0..setup.msize).map(|_| rng.gen()).collect()
            });
        }
        self.ranks[rank].open += 1;
        let order = self.posts.len() as u64;
        self.posts.insert((at, order), Post { rank, lanes, setup });
        self.schedule(at, Event::Post);
        self
    }

    /// Posts broadcast `setup` over `lanes` at every rank at time 0.
    pub fn post_everywhere(&mut self, lanes: &[Lane], setup: Setup) -> &mut SimNet {
        let lanes: Arc<[Lane]> = lanes.into();
        for r in 0..self.ranks.len() {
            self.post_shared(r, 0, lanes.clone(), setup);
        }
        self
    }

    /// The root's message of broadcast `seq`.
    pub fn message(&self, seq: u64) -> &[u8] {
        &self.messages[&seq]
    }

    /// When rank `rank`'s part of broadcast `seq` was over (its `bcast` would return).
    pub fn finished_at(&self, rank: usize, seq: u64) -> Option<u64> {
        self.ranks[rank].finished.get(&seq).copied()
    }

    /// When rank `rank` held the whole message of broadcast `seq`.
    pub fn holds_at(&self, rank: usize, seq: u64) -> Option<u64> {
        self.ranks[rank].holds.get(&seq).copied()
    }

    /// Every (edge, sender) whose data crossed an edge other than the sender's own uplink,
    /// with when it did, by edge then sender.
    pub fn flows(&self) -> Vec<Flow> {
        self.flows
            .iter()
            .enumerate()
            .flat_map(|(e, senders)| {
                senders.sorted().map(move |(sender, first, last)| Flow {
                    edge: DirEdge(e as u32),
                    sender,
                    first,
                    last,
                })
            })
            .collect()
    }

    /// Rank `rank`'s buffer of broadcast `seq`, once posted.
    pub fn buffer(&self, rank: usize, seq: u64) -> Option<&[u8]> {
        self.ranks[rank].bufs.get(&seq).map(Vec::as_slice)
    }

    pub fn stats(&self) -> Stats {
        let timeouts = self
            .ranks
            .iter()
            .filter_map(|r| r.lossy.as_ref())
            .map(|l| l.totals().timeouts)
            .sum();
        Stats {
            timeouts,
            ..self.stats
        }
    }

    /// Every edge's counters, by `DirEdge.0`.
    pub fn link_stats(&self) -> Vec<super::LinkStats> {
        self.links.iter().map(SimLink::stats).collect()
    }

    /// The virtual time.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Runs until every rank that is neither dead nor failed has completed all its
    /// broadcasts and every reliable message between such ranks is acknowledged (a rank
    /// whose broadcasts are over keeps answering, as a communicator's progress thread does).
    /// Panics when stuck, which is a bug: ranks waiting with no event to come, or still
    /// busy after 20 million events or an hour of virtual time (timers that keep firing
    /// while no broadcast progresses and none times out).
    pub fn run(&mut self) -> Vec<Outcome> {
        self.busy_ranks = self.ranks.iter().filter(|r| r.runs() && r.open > 0).count();
        let mut events = 0u64;
        loop {
            if self.busy_ranks == 0 && self.quiet() {
                break;
            }
            let Some(&Reverse((at, _, _))) = self.events.peek() else {
                panic!("hang: ranks wait with nothing to come\n{}", self.describe());
            };
            self.now = self.now.max(at);
            assert!(
                events <= self.max_events && self.now <= self.max_time,
                "stuck: {events} events by {} virtual ns\n{}",
                self.now,
                self.describe()
            );
            events += self.step();
        }
        self.ranks
            .iter()
            .map(|r| match (&r.failed, r.gone, r.dead) {
                (_, _, true) => Outcome::Dead,
                (Some(e), _, _) => Outcome::Failed(e.clone()),
                (None, Some((peer, silent_ns)), _) => Outcome::PeerGone { peer, silent_ns },
                (None, None, false) => Outcome::Done,
            })
            .collect()
    }

    fn schedule(&mut self, at: u64, event: Event) {
        self.order += 1;
        self.events.push(Reverse((at, self.order, event)));
    }

    /// Rank `r` fails with `e` (a broadcast failed there; it stops).
    fn fail(&mut self, r: usize, e: EngineError) {
        self.stop(r);
        self.ranks[r].failed = Some(e);
    }

    /// Rank `r` stops running (it is failed or finds a peer gone).
    fn stop(&mut self, r: usize) {
        let rank = &self.ranks[r];
        if rank.runs() && rank.open > 0 {
            self.busy_ranks -= 1;
        }
    }

    /// Nothing left to do: every running rank completed, and what it sent to another running
    /// rank is acknowledged.
    fn quiet(&self) -> bool {
        self.ranks.iter().all(|r| {
            !r.runs()
                || (r.open == 0
                    && r.lossy.as_ref().is_none_or(|l| {
                        l.peers().all(|p| l.is_idle_to(p) || !self.ranks[p].runs())
                    }))
        })
    }

    /// Everything due at `self.now`: posts, arrivals, timers; then every rank they touched
    /// sends. Returns how many events it handled.
    fn step(&mut self) -> u64 {
        let now = self.now;
        let mut touched = Vec::new();
        let mut handled = 0;
        while let Some(&Reverse((at, _, event))) = self.events.peek() {
            if at > now {
                break;
            }
            self.events.pop();
            handled += 1;
            match event {
                Event::Post => {
                    while let Some(entry) = self.posts.first_entry() {
                        if entry.key().0 > now {
                            break;
                        }
                        let post = entry.remove();
                        touched.push(post.rank);
                        self.start(post);
                    }
                }
                Event::Arrival(e) => self.arrive(e as usize, &mut touched),
                Event::Timer(r) => {
                    let r = r as usize;
                    if self.ranks[r].timer_at.is_some_and(|t| t <= now) {
                        self.ranks[r].timer_at = None;
                    }
                    if self.timeout(r) {
                        touched.push(r);
                    } else {
                        self.arm(r);
                    }
                }
            }
        }
        touched.sort_unstable();
        touched.dedup();
        for r in touched {
            self.flush(r);
            self.arm(r);
        }
        handled
    }

    /// Messages that reached the far end of edge `e` by now go on to their next edge or are
    /// delivered.
    fn arrive(&mut self, e: usize, touched: &mut Vec<usize>) {
        let now = self.now;
        while let Some((_, hop)) = self.links[e].pop_arrived(now) {
            if hop.hop + 1 < hop.path.len() {
                self.put(Hop {
                    hop: hop.hop + 1,
                    ..hop
                });
            } else if hop.part & NOT_LAST == 0 {
                touched.push(hop.to);
                let packet = self.packets.take(hop.packet);
                self.deliver(hop.from, hop.to, packet);
            }
        }
    }

    /// Runs rank `r`'s timers if one is due; whether it did.
    fn timeout(&mut self, r: usize) -> bool {
        let now = self.now;
        if !self.ranks[r].runs() || self.next_timeout(r).is_none_or(|t| t > now) {
            return false;
        }
        // The adapter's timers (retransmission, pacing, liveness) run when the rank
        // flushes.
        if let Err(e) = self.ranks[r].endpoint.handle_timeout(now) {
            self.fail(r, e);
        }
        true
    }

    /// Rank `r`'s earliest timer: the engine's idle timer, or the lossy adapter's
    /// (retransmission, pacing, a heartbeat or a peer's liveness limit).
    fn next_timeout(&self, r: usize) -> Option<u64> {
        let rank = &self.ranks[r];
        let lossy = rank.lossy.as_ref().and_then(|l| {
            let waiting = rank.endpoint.waiting_for();
            let timers = l.poll_timeout(self.now, false);
            timers.into_iter().chain(l.liveness_timeout(&waiting)).min()
        });
        rank.endpoint.poll_timeout().into_iter().chain(lossy).min()
    }

    /// Schedules rank `r`'s earliest timer unless an event at or before it is scheduled. The
    /// engine's idle timer only moves later, so a timer event that finds nothing due re-arms
    /// it; retransmission timers can move earlier, so ranks with peers check after each
    /// flush.
    fn arm(&mut self, r: usize) {
        if !self.ranks[r].runs() {
            return;
        }
        let pending = self.ranks[r].timer_at;
        if pending.is_some() && self.ranks[r].lossy.is_none() {
            return;
        }
        if let Some(t) = self.next_timeout(r) {
            if pending.is_none_or(|p| t < p) {
                self.ranks[r].timer_at = Some(t);
                self.schedule(t, Event::Timer(r as u32));
            }
        }
    }

    fn start(&mut self, post: Post) {
        let now = self.now;
        let rank = &mut self.ranks[post.rank];
        if !rank.runs() {
            return;
        }
        let setup = post.setup;
        let mut buf = if !self.payloads {
            Vec::new()
        } else if setup.root == post.rank {
            self.messages[&setup.seq].clone()
        } else {
            vec![0xEE; setup.msize as usize]
        };
        let rails = self.rails.clone();
        let posted = Bcast::new(post.rank, &post.lanes, setup, self.engine, now)
            .map(|b| b.with_rails(rails))
            .and_then(|b| rank.endpoint.post(b, &mut buf, now));
        rank.bufs.insert(setup.seq, buf);
        if setup.root == post.rank || setup.msize == 0 {
            rank.holds.insert(setup.seq, now);
        }
        if let Err(e) = posted {
            self.fail(post.rank, e);
        }
    }

    /// Whether messages from `a` to `b` are numbered and acknowledged.
    fn numbered(&mut self, a: usize, b: usize) -> bool {
        if self.reliable_everywhere {
            return true;
        }
        if self.lossy_links == 0 {
            return false;
        }
        let path = self.path(a, b, 0);
        path.iter()
            .any(|e| self.links[e.0 as usize].model().is_lossy())
    }

    /// Rank `r`'s lossy adapter, knowing peer `p`.
    fn lossy(&mut self, r: usize, p: usize) -> &mut Lossy {
        // Simulated edges take every frame: the batch only bounds a vector.
        let (config, batch) = (self.reliable, 64);
        let liveness = self.liveness.unwrap_or(self.engine.idle_timeout);
        let lossy = self.ranks[r].lossy.get_or_insert_with(|| {
            Lossy::new(config, liveness, PACED_FRAME_BYTES, usize::MAX, batch)
        });
        if !lossy.contains(p) {
            lossy.add(p);
        }
        lossy
    }

    fn transmit(&mut self, from: usize, to: usize, packet: Packet) {
        self.transmit_on(from, to, 0, packet);
    }

    /// [`SimNet::transmit`] through NIC `rail` of both ranks.
    fn transmit_on(&mut self, from: usize, to: usize, rail: usize, packet: Packet) {
        let path = self.path(from, to, rail);
        if path.is_empty() {
            return;
        }
        let now = self.now;
        let packet = self.packets.insert(packet);
        let hop = Hop {
            from,
            to,
            hop: 0,
            head: now,
            tail: now,
            path,
            packet,
            part: 0,
        };
        if self.batching {
            self.batch.push(hop);
        } else {
            self.put(hop);
        }
    }

    /// Puts one round of a rank's first hops on its port: round robin between destinations
    /// when the port is shared and two or more of them get large messages
    /// ([`SimNet::shared_port`]), otherwise in order.
    fn put_round(&mut self, hops: &mut Vec<Hop>) {
        let quantum = self.shared_port.map_or(u64::MAX, u64::from);
        if hops.len() < 2 {
            for hop in hops.drain(..) {
                self.put(hop);
            }
            return;
        }
        let payload = |net: &SimNet, h: &Hop| net.packets.get(h.packet).payload_len() as u64;
        // Two destinations with large messages, or one message after another.
        let mut large = hops.iter().filter(|h| payload(self, h) > quantum);
        let first = large.next().map(|h| h.to);
        if !large.any(|h| Some(h.to) != first) {
            for hop in hops.drain(..) {
                self.put(hop);
            }
            return;
        }
        // One queue per destination, in order of first message: (hop, payload bytes left).
        let mut streams: Vec<(usize, VecDeque<(Hop, u64)>)> = Vec::new();
        for hop in hops.drain(..) {
            let left = payload(self, &hop);
            match streams.iter_mut().find(|(to, _)| *to == hop.to) {
                Some((_, queue)) => queue.push_back((hop, left)),
                None => streams.push((hop.to, VecDeque::from([(hop, left)]))),
            }
        }
        while !streams.is_empty() {
            for (_, queue) in &mut streams {
                let Some((hop, left)) = queue.front_mut() else {
                    continue;
                };
                let whole = self.packets.get(hop.packet).payload_len() as u64;
                if whole <= quantum {
                    let (hop, _) = queue.pop_front().expect("a front");
                    self.put(hop);
                    continue;
                }
                let share = (*left).min(quantum);
                *left -= share;
                let mut part = share as u32;
                if *left > 0 {
                    part |= NOT_LAST;
                }
                self.put(Hop {
                    part,
                    ..hop.clone()
                });
                if *left == 0 {
                    queue.pop_front();
                }
            }
            streams.retain(|(_, queue)| !queue.is_empty());
        }
    }

    /// The path from `from` to `to` on `rail` (rail 0 if the topology lacks it), computed once
    /// per pair and rail.
    fn path(&mut self, from: usize, to: usize, rail: usize) -> Arc<[DirEdge]> {
        const ROUTES: usize = 8;
        let rail = if rail < self.topology.rails() {
            rail
        } else {
            0
        };
        let routes = &self.ranks[from].routes;
        if let Some((_, path)) = routes.iter().find(|(key, _)| *key == (to, rail)) {
            return path.clone();
        }
        let topology = &self.topology;
        let path = self
            .paths
            .entry((from, to, rail))
            .or_insert_with(|| topology.path_on(rail, from, to).into())
            .clone();
        let routes = &mut self.ranks[from].routes;
        if routes.len() < ROUTES {
            routes.push(((to, rail), path.clone()));
        }
        path
    }

    /// Puts `hop.packet` on edge `hop.hop` of its path; its first byte got there at
    /// `hop.head`, its last at `hop.tail`.
    fn put(&mut self, hop: Hop) {
        let (from, head, tail, id) = (hop.from, hop.head, hop.tail, hop.packet);
        let path = &hop.path;
        let hop_index = hop.hop;
        let e = path[hop_index].0 as usize;
        let link = &self.links[e];
        let packet = self.packets.get(id);
        let payload = packet.payload_len();
        // A share of a message takes its share of the wire and of g.
        let (bytes, share) = match hop.part & !NOT_LAST {
            0 => (packet.bytes(), 1.0),
            part => (
                HEADER_BYTES + part as usize,
                f64::from(part) / payload.max(1) as f64,
            ),
        };
        let mut service = link.model().wire_ns(bytes);
        let mut extra = 0;
        if let Some(p) = &self.profile {
            let cost = p.cost(payload as u64);
            if hop_index == 0 && packet.is_data() {
                service = service.max((cost.g_us * 1000.0 * share).round() as u64);
            }
            if hop_index + 1 == path.len() {
                extra = (cost.l_us * 1000.0).round() as u64;
            }
        }
        let data = packet.is_data();
        let forward = hop_index + 1 < path.len();
        let stamp = |h: &mut Hop, first, last| {
            h.head = first;
            h.tail = last;
        };
        let through = Through {
            head,
            tail,
            service,
            extra,
            forward,
        };
        let sent = self.links[e].send_through(through, hop, stamp);
        let (start, end) = (sent.start, sent.end);
        let copies = sent.arrivals.iter().flatten().count();
        if copies != 1 {
            self.packets.copies(id, copies);
        }
        for at in sent.arrivals.into_iter().flatten() {
            self.schedule(at, Event::Arrival(e as u32));
        }
        if data && hop_index > 0 {
            self.flows[e].record(from, start, end);
        }
    }

    fn deliver(&mut self, from: usize, to: usize, packet: Packet) {
        if !self.ranks[to].runs() {
            return;
        }
        let now = self.now;
        let (message, payload) = match packet {
            Packet::Bare { message, payload } => (message, payload),
            Packet::Frame { frame, payload } => {
                let acked = (frame.ack, frame.sack, frame.credit);
                let seq = frame.piece.as_ref().map(|_| (frame.seq, frame.copy));
                let verdict = self
                    .lossy(to, from)
                    .receive(now, from, acked, frame.repaired, seq);
                match (verdict, frame.piece) {
                    (Some(Accept::Fresh), Some(Piece::Message { message, .. })) => {
                        (message, payload)
                    }
                    _ => return,
                }
            }
        };
        if let Err(e) = self.engine_in(to, from, message, payload) {
            self.fail(to, e);
        }
    }

    /// An engine message arrives at `to`, exactly once: to its broadcast's buffer, held, or
    /// dropped, as a link does it.
    fn engine_in(
        &mut self,
        to: usize,
        from: usize,
        message: Message,
        payload: Vec<u8>,
    ) -> Result<(), EngineError> {
        let (now, payloads) = (self.now, self.payloads);
        let msize = match message {
            Message::Data(h) => h.msize,
            _ => 0,
        };
        let rank = &mut self.ranks[to];
        let (bufs, landed, holds) = (&mut rank.bufs, &mut rank.landed, &mut rank.holds);
        rank.endpoint
            .deliver(now, from, message, payload, |seq, range, payload| {
                if payloads {
                    let buf = bufs.get_mut(&seq).ok_or_else(|| {
                        EngineError::Protocol(format!("broadcast {seq} has no buffer"))
                    })?;
                    engine::copy_into(buf, range.clone(), payload)?;
                }
                let landed = landed.entry(seq).or_default();
                *landed += range.len() as u64;
                if *landed == msize {
                    holds.entry(seq).or_insert(now);
                }
                Ok(())
            })
    }

    /// Rank `r` sends what its endpoint and its reliability have, and retires completed
    /// broadcasts.
    fn flush(&mut self, r: usize) {
        if !self.ranks[r].runs() {
            return;
        }
        let now = self.now;
        self.batching =
            self.shared_port.is_some() && !self.reliable_everywhere && self.lossy_links == 0;
        while let Some((seq, t)) = self.ranks[r].endpoint.poll_transmit(now) {
            self.stats.messages += 1;
            if self.numbered(r, t.to) {
                self.lossy(r, t.to).queue(t.to, t.message, t.payload);
                continue;
            }
            let payload = if self.payloads {
                self.ranks[r].bufs[&seq][t.payload.clone()].to_vec()
            } else {
                Vec::new()
            };
            self.stats.sends += 1;
            let rail = self.ranks[r].endpoint.rail_of(&t.message);
            let packet = Packet::Bare {
                message: t.message,
                payload,
            };
            self.transmit_on(r, t.to, rail, packet);
        }
        if self.batching {
            self.batching = false;
            let mut round = std::mem::take(&mut self.batch);
            self.put_round(&mut round);
            self.batch = round;
        }
        if self.ranks[r].lossy.is_some() {
            self.flush_lossy(r);
            if !self.ranks[r].runs() {
                return;
            }
        }
        let rank = &mut self.ranks[r];
        let done: Vec<u64> = rank
            .endpoint
            .active()
            .filter(|&s| rank.endpoint.is_done(s))
            .collect();
        for seq in done {
            rank.endpoint.finish(seq);
            rank.finished.insert(seq, now);
            if !self.payloads {
                rank.bufs.remove(&seq);
            }
            rank.open -= 1;
            if rank.open == 0 {
                self.busy_ranks -= 1;
            }
        }
    }

    /// Rank `r`'s lossy adapter checks its peers' liveness (queueing heartbeats, or stopping
    /// the rank when a waited-for peer is gone) and sends what it hands out: numbered
    /// messages and heartbeats, each with its acknowledgement, then bare acknowledgements.
    /// Simulated edges take every frame (they have no send buffer to fill).
    fn flush_lossy(&mut self, r: usize) {
        let now = self.now;
        let rank = &mut self.ranks[r];
        let Some(lossy) = rank.lossy.as_mut() else {
            return;
        };
        let waiting = rank.endpoint.waiting_for();
        if let Err(g) = lossy.check_liveness(now, &waiting) {
            self.stop(r);
            self.ranks[r].gone = Some((g.peer, g.silent));
            return;
        }
        let mut frames = Vec::new();
        let sent = lossy.send::<Infallible>(now, &mut |batch| {
            frames.extend_from_slice(batch);
            Ok(batch.len())
        });
        let Ok(_) = sent;
        for frame in frames {
            let payload = match &frame.piece {
                Some(Piece::Message {
                    message, payload, ..
                }) => {
                    self.stats.sends += 1;
                    self.stats.retransmits += u64::from(frame.copy.is_some());
                    match self.ranks[r].bufs.get(&message.seq()) {
                        Some(buf) if self.payloads => buf[payload.clone()].to_vec(),
                        _ => Vec::new(),
                    }
                }
                Some(Piece::Heartbeat) => {
                    self.stats.heartbeats += 1;
                    Vec::new()
                }
                None => {
                    self.stats.acks += 1;
                    Vec::new()
                }
            };
            let to = frame.peer;
            self.transmit(r, to, Packet::Frame { frame, payload });
        }
    }

    /// Every running rank's state, for a panic message.
    fn describe(&self) -> String {
        let mut out = String::new();
        for (r, rank) in self.ranks.iter().enumerate() {
            out += &format!(
                "rank {r}: open {} dead {} failed {:?} gone {:?}\n{}\n",
                rank.open,
                rank.dead,
                rank.failed,
                rank.gone,
                rank.endpoint.describe()
            );
            if let Some(l) = &rank.lossy {
                out += &l.describe(self.now);
                out += "\n";
            }
        }
        out
    }
}
