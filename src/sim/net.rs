//! The simulated network: ranks on a topology's machines, each running the real
//! [`Endpoint`], and over every pair whose path is lossy the real per-peer reliability
//! ([`engine::reliable`](crate::engine::reliable)), as raw Ethernet runs them.
//!
//! A message from rank a to rank b crosses the directed edges of `Topology::path(a, b)`, one
//! [`SimLink`] each (store and forward: each edge delays, loses, duplicates and reorders on its
//! own). Each engine message is one reliable item; acknowledgements are messages of their own
//! on the way back. Broadcasts are posted at chosen virtual times, several per rank, so ranks
//! can be late and broadcasts overlap. Everything is seeded and ordered (`BTreeMap`), so a run
//! is reproducible.

use super::{LinkModel, SimLink};
use crate::engine::reliable::{self, Accept, Receiver, Sender};
use crate::engine::{self, Bcast, Endpoint, EngineError, Message, Route, Setup};
use crate::plan::Lane;
use crate::topology::{DirEdge, Topology};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, VecDeque};

/// Bytes of header counted for every message on an edge with a finite rate.
const HEADER_BYTES: usize = 40;

/// What travels between ranks.
#[derive(Debug, Clone)]
enum Packet {
    /// An engine message and its payload. `number` is its per-peer sequence number when the
    /// path is lossy (0: sent bare), `copy` which send of that number this is.
    Engine {
        number: u64,
        copy: u8,
        message: Message,
        payload: Vec<u8>,
    },
    /// The receiver's acknowledgement of numbered messages.
    Ack {
        ack: u64,
        sack: u64,
        credit: u32,
        repaired: Option<(u64, u8)>,
    },
}

impl Packet {
    fn bytes(&self) -> usize {
        HEADER_BYTES
            + match self {
                Packet::Engine { payload, .. } => payload.len(),
                Packet::Ack { .. } => 0,
            }
    }
}

/// A packet on its way: it is on edge `hop` of the path from `from` to `to`.
#[derive(Debug, Clone)]
struct Hop {
    from: usize,
    to: usize,
    hop: usize,
    packet: Packet,
}

/// An engine message kept for retransmission, with a copy of its payload.
#[derive(Debug, Clone)]
struct Item {
    message: Message,
    payload: Vec<u8>,
}

/// The reliability toward one peer.
#[derive(Debug)]
struct Peer {
    tx: Sender<Item>,
    rx: Receiver,
    /// New items waiting for the peer's credit.
    queue: VecDeque<Item>,
}

/// How a rank's simulation ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Every broadcast it posted completed.
    Done,
    /// A broadcast failed here; the rank stopped.
    Failed(EngineError),
    /// The rank was killed: it neither sent nor received.
    Dead,
}

/// What the ranks put on the network (monotonic counters over the whole run).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Engine messages the endpoints handed out.
    pub messages: u64,
    /// Engine messages put on the network, retransmissions included.
    pub sends: u64,
    /// Of these, retransmissions.
    pub retransmits: u64,
    /// Acknowledgements put on the network.
    pub acks: u64,
    /// Retransmission timer expiries.
    pub timeouts: u64,
}

#[derive(Debug)]
struct Rank {
    endpoint: Endpoint,
    bufs: BTreeMap<u64, Vec<u8>>,
    peers: BTreeMap<usize, Peer>,
    /// Broadcasts posted and not complete yet, and posts still scheduled.
    open: usize,
    dead: bool,
    failed: Option<EngineError>,
}

impl Rank {
    fn runs(&self) -> bool {
        !self.dead && self.failed.is_none()
    }
}

/// A broadcast to post at a rank at a virtual time.
#[derive(Debug)]
struct Post {
    rank: usize,
    lanes: Vec<Lane>,
    setup: Setup,
}

/// Ranks, links and a virtual clock.
#[derive(Debug)]
pub struct SimNet {
    topology: Topology,
    /// One per directed edge (`DirEdge.0`).
    links: Vec<SimLink<Hop>>,
    ranks: Vec<Rank>,
    engine: engine::Config,
    reliable: reliable::Config,
    reliable_everywhere: bool,
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
                peers: BTreeMap::new(),
                open: 0,
                dead: false,
                failed: None,
            })
            .collect();
        SimNet {
            topology: topology.clone(),
            links,
            ranks,
            engine: engine::Config::default(),
            reliable: reliable::Config::default(),
            reliable_everywhere: false,
            seed,
            posts: BTreeMap::new(),
            messages: BTreeMap::new(),
            now: 0,
            stats: Stats::default(),
            max_events: 20_000_000,
            max_time: 3_600_000_000_000,
        }
    }

    /// Every rank's engine tuning.
    pub fn engine_config(&mut self, config: engine::Config) -> &mut SimNet {
        self.engine = config;
        self
    }

    /// The reliability's tuning, for every pair that uses it.
    pub fn reliable_config(&mut self, config: reliable::Config) -> &mut SimNet {
        self.reliable = config;
        self
    }

    /// Runs the reliability between every pair of ranks, lossy path or not (as raw
    /// Ethernet does).
    pub fn reliable_everywhere(&mut self) -> &mut SimNet {
        self.reliable_everywhere = true;
        self
    }

    pub fn set_link(&mut self, edge: DirEdge, model: LinkModel) -> &mut SimNet {
        self.links[edge.0 as usize].set_model(model);
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
        let seed = self.seed ^ setup.seq.wrapping_mul(0xD1B5_4A32_D192_ED03);
        self.messages.entry(setup.seq).or_insert_with(|| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            (0..setup.msize).map(|_| rng.gen()).collect()
        });
        self.ranks[rank].open += 1;
        let order = self.posts.len() as u64;
        self.posts.insert(
            (at, order),
            Post {
                rank,
                lanes: lanes.to_vec(),
                setup,
            },
        );
        self
    }

    /// Posts broadcast `setup` over `lanes` at every rank at time 0.
    pub fn post_everywhere(&mut self, lanes: &[Lane], setup: Setup) -> &mut SimNet {
        for r in 0..self.ranks.len() {
            self.post(r, 0, lanes, setup);
        }
        self
    }

    /// The root's message of broadcast `seq`.
    pub fn message(&self, seq: u64) -> &[u8] {
        &self.messages[&seq]
    }

    /// Rank `rank`'s buffer of broadcast `seq`, once posted.
    pub fn buffer(&self, rank: usize, seq: u64) -> Option<&[u8]> {
        self.ranks[rank].bufs.get(&seq).map(Vec::as_slice)
    }

    pub fn stats(&self) -> Stats {
        self.stats
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
        let mut events = 0u64;
        loop {
            if self.quiet() {
                break;
            }
            events += 1;
            assert!(
                events <= self.max_events && self.now <= self.max_time,
                "stuck: {events} events by {} virtual ns\n{}",
                self.now,
                self.describe()
            );
            let Some(now) = self.next_event() else {
                panic!("hang: ranks wait with nothing to come\n{}", self.describe());
            };
            self.now = self.now.max(now);
            self.step();
        }
        self.ranks
            .iter()
            .map(|r| match (&r.failed, r.dead) {
                (_, true) => Outcome::Dead,
                (Some(e), _) => Outcome::Failed(e.clone()),
                (None, false) => Outcome::Done,
            })
            .collect()
    }

    /// Nothing left to do: every running rank completed, and what it sent to another running
    /// rank is acknowledged.
    fn quiet(&self) -> bool {
        self.ranks.iter().all(|r| {
            !r.runs()
                || (r.open == 0
                    && r.peers
                        .iter()
                        .all(|(&p, peer)| peer.tx.is_idle() || !self.ranks[p].runs()))
        })
    }

    fn next_event(&self) -> Option<u64> {
        let arrivals = self.links.iter().filter_map(SimLink::next_arrival);
        let posts = self.posts.keys().next().map(|&(at, _)| at);
        let timers = self.ranks.iter().filter(|r| r.runs()).flat_map(|r| {
            r.endpoint
                .poll_timeout()
                .into_iter()
                .chain(r.peers.values().filter_map(|p| p.tx.poll_timeout()))
        });
        arrivals.chain(posts).chain(timers).min()
    }

    /// Everything due at `self.now`: posts, arrivals, timers; then every rank sends.
    fn step(&mut self) {
        let now = self.now;
        while let Some(entry) = self.posts.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let post = entry.remove();
            self.start(post);
        }
        for e in 0..self.links.len() {
            while let Some((_, hop)) = self.links[e].pop_arrived(now) {
                let path = self.topology.path(hop.from, hop.to);
                if hop.hop + 1 < path.len() {
                    let next = path[hop.hop + 1].0 as usize;
                    let bytes = hop.packet.bytes();
                    self.links[next].send(
                        now,
                        bytes,
                        Hop {
                            hop: hop.hop + 1,
                            ..hop
                        },
                    );
                } else {
                    self.deliver(hop.from, hop.to, hop.packet);
                }
            }
        }
        for r in 0..self.ranks.len() {
            let rank = &mut self.ranks[r];
            if !rank.runs() {
                continue;
            }
            if let Err(e) = rank.endpoint.handle_timeout(now) {
                rank.failed = Some(e);
                continue;
            }
            for peer in rank.peers.values_mut() {
                let before = peer.tx.timeouts;
                peer.tx.handle_timeout(now);
                self.stats.timeouts += peer.tx.timeouts - before;
            }
        }
        for r in 0..self.ranks.len() {
            self.flush(r);
        }
    }

    fn start(&mut self, post: Post) {
        let now = self.now;
        let rank = &mut self.ranks[post.rank];
        if !rank.runs() {
            return;
        }
        let setup = post.setup;
        let mut buf = if setup.root == post.rank {
            self.messages[&setup.seq].clone()
        } else {
            vec![0xEE; setup.msize as usize]
        };
        let posted = Bcast::new(post.rank, &post.lanes, setup, self.engine, now)
            .and_then(|b| rank.endpoint.post(b, &mut buf, now));
        rank.bufs.insert(setup.seq, buf);
        if let Err(e) = posted {
            rank.failed = Some(e);
        }
    }

    /// Whether messages from `a` to `b` are numbered and acknowledged.
    fn numbered(&self, a: usize, b: usize) -> bool {
        self.reliable_everywhere
            || self
                .topology
                .path(a, b)
                .iter()
                .any(|e| self.links[e.0 as usize].model().is_lossy())
    }

    fn peer(&mut self, r: usize, p: usize) -> &mut Peer {
        let config = self.reliable;
        self.ranks[r].peers.entry(p).or_insert_with(|| Peer {
            tx: Sender::new(config),
            rx: Receiver::new(config),
            queue: VecDeque::new(),
        })
    }

    fn transmit(&mut self, from: usize, to: usize, packet: Packet) {
        let Some(first) = self.topology.path(from, to).first().copied() else {
            return;
        };
        let bytes = packet.bytes();
        let hop = Hop {
            from,
            to,
            hop: 0,
            packet,
        };
        self.links[first.0 as usize].send(self.now, bytes, hop);
    }

    fn deliver(&mut self, from: usize, to: usize, packet: Packet) {
        if !self.ranks[to].runs() {
            return;
        }
        let now = self.now;
        match packet {
            Packet::Ack {
                ack,
                sack,
                credit,
                repaired,
            } => {
                self.peer(to, from)
                    .tx
                    .on_ack(now, ack, sack, credit, repaired);
            }
            Packet::Engine {
                number,
                copy,
                message,
                payload,
            } => {
                if number != 0 {
                    let rx = &mut self.peer(to, from).rx;
                    if rx.accept(number) != Accept::Fresh {
                        return;
                    }
                    if copy != 1 {
                        rx.repaired(number, copy);
                    }
                }
                if let Err(e) = self.engine_in(to, from, message, payload) {
                    self.ranks[to].failed = Some(e);
                }
            }
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
        let now = self.now;
        let rank = &mut self.ranks[to];
        let Message::Data(h) = message else {
            return rank.endpoint.handle_message(now, from, &message);
        };
        match rank.endpoint.route_data(from, &h)? {
            Route::Into { seq, range } => {
                let buf = rank
                    .bufs
                    .get_mut(&seq)
                    .expect("a running broadcast has a buffer");
                if range.len() != payload.len() || range.end > buf.len() {
                    return Err(EngineError::Protocol(format!(
                        "rank {from} sent {} bytes for {range:?}",
                        payload.len()
                    )));
                }
                buf[range].copy_from_slice(&payload);
                rank.endpoint.handle_data(now, &h);
            }
            Route::Hold => rank.endpoint.hold(from, message, payload),
            Route::Discard => {}
        }
        Ok(())
    }

    /// Rank `r` sends what its endpoint and its reliability have, and retires completed
    /// broadcasts.
    fn flush(&mut self, r: usize) {
        if !self.ranks[r].runs() {
            return;
        }
        let now = self.now;
        while let Some((seq, t)) = self.ranks[r].endpoint.poll_transmit(now) {
            self.stats.messages += 1;
            let payload = self.ranks[r].bufs[&seq][t.payload.clone()].to_vec();
            let item = Item {
                message: t.message,
                payload,
            };
            if self.numbered(r, t.to) {
                self.peer(r, t.to).queue.push_back(item);
            } else {
                self.stats.sends += 1;
                self.transmit(r, t.to, bare(item));
            }
        }
        let peers: Vec<usize> = self.ranks[r].peers.keys().copied().collect();
        for p in peers {
            let mut out = Vec::new();
            let peer = self.peer(r, p);
            while let Some((number, item)) = peer.tx.poll_retransmit(now) {
                let item = item.clone();
                let copy = peer.tx.next_copy(number).expect("unacknowledged");
                peer.tx.sent(number, now);
                out.push(numbered(number, copy, item));
            }
            let retransmits = out.len() as u64;
            while peer.tx.can_send() {
                let Some(item) = peer.queue.pop_front() else {
                    break;
                };
                let number = peer.tx.push(now, item.clone());
                peer.tx.sent(number, now);
                out.push(numbered(number, 1, item));
            }
            if peer.rx.ack_due() {
                let (ack, sack, credit) = peer.rx.ack();
                peer.rx.acked();
                let repaired = peer.rx.take_repaired();
                out.push(Packet::Ack {
                    ack,
                    sack,
                    credit,
                    repaired,
                });
                self.stats.acks += 1;
            }
            self.stats.retransmits += retransmits;
            self.stats.sends += out
                .iter()
                .filter(|p| matches!(p, Packet::Engine { .. }))
                .count() as u64;
            for packet in out {
                self.transmit(r, p, packet);
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
            rank.open -= 1;
        }
    }

    /// Every running rank's state, for a panic message.
    fn describe(&self) -> String {
        let mut out = String::new();
        for (r, rank) in self.ranks.iter().enumerate() {
            out += &format!(
                "rank {r}: open {} dead {} failed {:?}\n{}\n",
                rank.open,
                rank.dead,
                rank.failed,
                rank.endpoint.describe()
            );
            for (p, peer) in &rank.peers {
                out += &format!(
                    "  peer {p}: tx {} | rx {} | queued {}\n",
                    peer.tx.describe(self.now),
                    peer.rx.describe(),
                    peer.queue.len()
                );
            }
        }
        out
    }
}

fn bare(item: Item) -> Packet {
    numbered(0, 1, item)
}

fn numbered(number: u64, copy: u8, item: Item) -> Packet {
    Packet::Engine {
        number,
        copy,
        message: item.message,
        payload: item.payload,
    }
}
