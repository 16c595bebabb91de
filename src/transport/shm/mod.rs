//! The shared-memory link between the ranks of one host. The bytes of a segment never cross a
//! socket: the reader copies them straight from the writer's user buffer with cross-memory
//! attach (`process_vm_readv`, one copy: [`cma`]) or from the writer's staging ring, a shared
//! `memfd` that the writer fills once for all its readers ([`stage`]): two copies per reader
//! pair, but 1 + k for a fan-out to k readers, with no contention between the readers. The
//! ring is the only way where the kernel refuses cross-memory attach (Yama, seccomp in
//! containers), and the faster one for large fan-outs ([`ShmLink::stages`]). What does cross
//! the pair's Unix socket are 64-byte records ([`crate::wire::shm`]): engine messages with the
//! writer's address, ring chunks, ring releases.
//!
//! A writer's buffer stays valid until the reader has it: the engine completes a broadcast at
//! a rank only when its children acknowledged every segment, and a child acknowledges a
//! segment only after copying it. A peer that dies closes its socket (and its memory goes
//! away): the broadcasts that wait for it fail at once; a peer that is only late is waited
//! for. Nothing has a name in the file system, so nothing is left behind by a killed rank.

mod close;
mod cma;
pub mod probe;
mod ring;
mod setup;
mod stage;
mod stream;

pub use setup::socket_name;

use super::arrival::Dest;
use super::driver::{Driver, Landing};
use super::wake::spin;
use super::{gone_buffer, slot, Buffers, Link, TransportError};
use crate::engine::Message;
use crate::wire::message::{self, HEADER};
use crate::wire::shm::{Record, HEAD, RECORD};
use ring::Ring;
use setup::{Gone, Knock, Pair};
use stage::{Key, Stage};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::io::{self, Read};
use std::ops::Range;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::str::FromStr;
use std::time::Duration;

/// A writer's staging ring, shared by its readers.
const RING_BYTES: usize = 8 << 20;
/// The largest piece of a segment in one ring chunk: small enough that several are in flight
/// and that the readers of a fan-out copy each one while it is still in the shared cache.
const CHUNK: usize = 1 << 20;
/// Bytes of records read from one peer per round.
const READ_BUDGET: usize = RECORD * 1024;
/// A round with no setup under way looks at the listener when its wait saw a connection, or
/// once in this many rounds (those that did not wait): a peer dialling this rank while it
/// is busy is answered within that many rounds, and a busy round makes no `accept` call.
const LISTEN_EVERY: u64 = 64;

const _: () = assert!(HEAD == HEADER, "a record carries one frame header");

/// How ranks on one host move segments (`PIPECAST_SHM`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShmMode {
    /// Single copy where the kernel allows it, else the ring, per pair (default).
    #[default]
    Auto,
    /// Single copy, or fail.
    Cma,
    /// Always the ring (two copies).
    Ring,
    /// No shared-memory link: ranks on one host use the network link (TCP loopback).
    Off,
}

impl FromStr for ShmMode {
    type Err = String;
    fn from_str(s: &str) -> Result<ShmMode, String> {
        match s.trim() {
            "auto" => Ok(ShmMode::Auto),
            "cma" => Ok(ShmMode::Cma),
            "ring" => Ok(ShmMode::Ring),
            "off" => Ok(ShmMode::Off),
            t => Err(format!("{t:?}: write auto, cma, ring or off")),
        }
    }
}

impl fmt::Display for ShmMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ShmMode::Auto => "auto",
            ShmMode::Cma => "cma",
            ShmMode::Ring => "ring",
            ShmMode::Off => "off",
        })
    }
}

/// A message waiting to leave: its header, and the part of its payload already chunked.
struct Out {
    head: [u8; HEADER],
    message: Message,
    seq: u64,
    payload: Range<usize>,
    at: usize,
}

/// A ring segment being assembled from its chunks.
struct Partial {
    message: Message,
    len: usize,
    dest: Dest,
    got: usize,
}

struct Peer {
    stream: UnixStream,
    pid: i32,
    /// This rank reads the peer's segments by cross-memory attach (else only its ring).
    attach: bool,
    /// The peer reads this rank's segments by cross-memory attach (else only our ring).
    attached: bool,
    /// The peer's staging ring, mapped read-only (`None` under `PIPECAST_SHM=cma`).
    rx: Option<Ring>,
    out: VecDeque<Out>,
    /// Encoded records not yet written.
    wbuf: Vec<u8>,
    rbuf: Vec<u8>,
    partial: Option<Partial>,
    /// Ring chunks of ours announced to the peer and not yet released, oldest first, and how
    /// many it released in all.
    announced: VecDeque<u64>,
    released: u64,
    /// Ring chunks of the peer's copied out here in all.
    consumed: u64,
    /// Segments by address of broadcasts not posted here yet, in arrival order: handled
    /// once their broadcast is ([`ShmLink::receive`]).
    deferred: VecDeque<Record>,
    /// Its stream ended without a goodbye, or failed: the peer is gone.
    closed: bool,
    /// Its stream was taken out of the link's epoll once closed (a closed stream is always
    /// readable: it would wake a router's waiting link every time).
    unwatched: bool,
    /// When a broadcast in flight last talked to it (the link's rounds): the bound closes the
    /// least recently used idle pairs first ([`close`]).
    last_used: u64,
    /// This rank's goodbye is queued: after it only ring releases go on this stream.
    bye_sent: bool,
    /// The peer's goodbye was read: after it only its ring releases come.
    bye_got: bool,
    /// Both goodbyes done and everything of ours written: our write side is shut.
    shut: bool,
    /// The peer's end of the stream was read after its goodbye (an orderly close).
    ended: bool,
}

impl Peer {
    fn new(stream: UnixStream, pid: i32, attach: bool, attached: bool, rx: Option<Ring>) -> Peer {
        Peer {
            stream,
            pid,
            attach,
            attached,
            rx,
            out: VecDeque::new(),
            wbuf: Vec::new(),
            rbuf: Vec::new(),
            partial: None,
            announced: VecDeque::new(),
            released: 0,
            consumed: 0,
            deferred: VecDeque::new(),
            closed: false,
            unwatched: false,
            last_used: 0,
            bye_sent: false,
            bye_got: false,
            shut: false,
            ended: false,
        }
    }

    /// Being closed (a goodbye either way): nothing new is queued to it; a later broadcast
    /// sets the pair up again once the close is over.
    fn closing(&self) -> bool {
        self.bye_sent || self.bye_got
    }
}

/// This rank's shared-memory link to the other ranks of its host.
pub struct ShmLink {
    me: usize,
    mode: ShmMode,
    /// `None` once shut down: a peer that dials this rank then is refused (gone), and the
    /// connections still queued are reset, so nobody waits for a rank that failed.
    listener: Option<UnixListener>,
    /// Every rank's socket name (only those on this host are used).
    names: Vec<String>,
    cookie: u64,
    /// 16 random bytes a peer reads to prove that cross-memory attach works.
    probe: Box<[u8; 16]>,
    /// The peers set up.
    peers: BTreeMap<usize, Peer>,
    /// Pairs being set up (`setup.rs`): messages to them wait in the engine.
    pairs: BTreeMap<usize, Pair>,
    /// Accepted streams whose hello has not arrived yet.
    knocks: Vec<Knock>,
    /// Peers found gone during a setup (refused, ended, queue full too long): an error for a
    /// broadcast that needs them.
    gone: BTreeMap<usize, Gone>,
    /// How long a dial may wait for a full listener queue, and an accepted stream for its
    /// hello (at least a minute).
    connect_timeout: Duration,
    /// Ranks on this host (the fan-out's width, [`stage_from`]); `None`: the peers set up
    /// and this rank.
    host_ranks: Option<usize>,
    /// What `describe` says before any pair is set up: `ring` under `PIPECAST_SHM=ring` or
    /// where this process may not even read itself by cross-memory attach (a seccomp
    /// profile), else `cma` (a pair refused it later falls back to the ring, logged).
    expected: &'static str,
    /// This rank's staging ring (`None` under `PIPECAST_SHM=cma`).
    stage: Option<Stage>,
    wake: Option<RawFd>,
    /// Readable when the listener or any pair's or peer's socket is (for a router whose
    /// other link waits).
    epoll: OwnedFd,
    cma_bytes: u64,
    ring_bytes: u64,
    /// Bytes of segments by address that arrived before their broadcast was posted here
    /// (read once it was, still by one copy).
    deferred_bytes: u64,
    /// Bytes of ring chunks that arrived before their broadcast was posted here (copied
    /// aside, then once more into the buffer).
    held_bytes: u64,
    /// How long a wait polls before it sleeps.
    poll: Duration,
    /// Rounds so far, and whether the last wait saw a connection queued at the listener.
    rounds: u64,
    knocked: bool,
    /// Pairs kept set up at most (`PIPECAST_MAX_CONNECTIONS` when given; unbounded by
    /// default): above, idle ones are closed, least recently used first ([`close`]).
    max_pairs: usize,
    /// The peers this link was asked to reach ([`Link::connect`]).
    serves: BTreeSet<usize>,
    /// Those of them the broadcasts in flight talk to, increasing, as of the driver's
    /// `in_flight` count `busy_at` (recomputed only when that moves).
    busy: Vec<usize>,
    busy_at: Option<u64>,
    /// Segments by address of broadcasts not posted yet that came on a pair closed since:
    /// handed to the pair set up next with that peer, in their order.
    leftover: BTreeMap<usize, VecDeque<Record>>,
    /// Idle pairs this rank closed (its goodbye first), and pairs closed in all.
    idle_closes: u64,
    closes: u64,
}

impl ShmLink {
    /// Listens on the abstract socket `name` ([`socket_name`]).
    /// Its waits poll for up to `poll` before they sleep ([`spin`]).
    pub fn bind(
        me: usize,
        name: &str,
        mode: ShmMode,
        poll: Duration,
    ) -> Result<ShmLink, TransportError> {
        let listener = setup::listen(name).map_err(|e| TransportError::Setup {
            what: format!("shared memory: listen on @{name}"),
            error: e.to_string(),
        })?;
        let mut probe = Box::new([0u8; 16]);
        rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut probe[..]);
        // SAFETY: no pointers; a non-negative result is a new descriptor we own.
        let e = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if e < 0 {
            return Err(io_err(None, io::Error::last_os_error()));
        }
        // SAFETY: fresh descriptor, owned by nobody else.
        let epoll = unsafe { OwnedFd::from_raw_fd(e) };
        let expected = match mode {
            ShmMode::Ring => "ring",
            ShmMode::Cma => "cma",
            ShmMode::Auto | ShmMode::Off => {
                match cma::probe(std::process::id() as i32, probe.as_ptr() as u64, &probe[..]) {
                    Ok(()) => "cma",
                    Err(_) => "ring",
                }
            }
        };
        let link = ShmLink {
            me,
            mode,
            listener: Some(listener),
            names: Vec::new(),
            cookie: 0,
            probe,
            peers: BTreeMap::new(),
            pairs: BTreeMap::new(),
            knocks: Vec::new(),
            gone: BTreeMap::new(),
            connect_timeout: setup::connect_timeout(Duration::ZERO),
            host_ranks: None,
            expected,
            stage: None,
            wake: None,
            epoll,
            cma_bytes: 0,
            ring_bytes: 0,
            deferred_bytes: 0,
            held_bytes: 0,
            poll,
            rounds: 0,
            knocked: false,
            max_pairs: usize::MAX,
            serves: BTreeSet::new(),
            busy: Vec::new(),
            busy_at: None,
            leftover: BTreeMap::new(),
            idle_closes: 0,
            closes: 0,
        };
        let l = link.listener.as_ref().expect("bound above").as_raw_fd();
        link.watch(l)?;
        Ok(link)
    }

    /// Every rank's socket name and the job cookie.
    pub fn set_peers(&mut self, names: Vec<String>, cookie: u64) {
        self.names = names;
        self.cookie = cookie;
    }

    /// How many ranks share this host (this one included): the width of a fan-out from it
    /// ([`stage_from`]). Without it, the peers set up so far and this rank.
    pub fn set_host_ranks(&mut self, ranks: usize) {
        self.host_ranks = Some(ranks);
    }

    /// Makes `fd` (a stream of this link, or its listener) wake the link's epoll.
    fn watch(&self, fd: RawFd) -> Result<(), TransportError> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: fd as u64,
        };
        // SAFETY: a live epoll_event; the descriptor is open (closing it later removes it
        // from the epoll set, as it is never duplicated).
        if unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0
        {
            return Err(io_err(None, io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Whether a pair is being set up here (dialled, accepted, or retrying a full queue).
    fn setting_up(&self) -> bool {
        !self.pairs.is_empty() || !self.knocks.is_empty()
    }

    /// Takes closed peers' streams out of the epoll (a closed stream would keep it readable).
    fn unwatch_closed(&mut self) {
        let epoll = self.epoll.as_raw_fd();
        for p in self
            .peers
            .values_mut()
            .filter(|p| (p.closed || p.ended) && !p.unwatched)
        {
            p.unwatched = true;
            // SAFETY: removes an open descriptor from our epoll; no pointer is read for DEL.
            unsafe {
                libc::epoll_ctl(
                    epoll,
                    libc::EPOLL_CTL_DEL,
                    p.stream.as_raw_fd(),
                    std::ptr::null_mut(),
                )
            };
        }
    }

    fn queue(&mut self, driver: &mut dyn Driver, now: u64) -> Result<(), TransportError> {
        loop {
            // Ready peers, and gone ones (their messages fail the round): a peer whose setup
            // is under way gets nothing yet, so nothing waits here unbounded.
            // A pair being closed gets nothing new either: its next messages go on the pair
            // set up again after the close.
            let (peers, gone) = (&self.peers, &self.gone);
            let served = |p| peers.get(&p).is_some_and(|q| !q.closing()) || gone.contains_key(&p);
            let Some(t) = driver.next(now, &served) else {
                break;
            };
            if let Some(why) = self.gone.get(&t.to) {
                return Err(why.error(t.to));
            }
            let peer = self.peers.get_mut(&t.to).expect("served");
            if peer.closed {
                return Err(TransportError::Closed { peer: t.to });
            }
            peer.out.push_back(Out {
                head: message::emit(&t.message),
                message: t.message,
                seq: t.seq,
                payload: t.payload,
                at: 0,
            });
        }
        Ok(())
    }

    /// From which message size a segment goes to a reader that could attach to our buffer
    /// through the staging ring instead (one copy into the ring, shared by every reader of
    /// the fan-out, then one copy out per reader; [`stage_from`]).
    fn stage_from(&self) -> u64 {
        match (&self.stage, self.mode) {
            (None, _) | (_, ShmMode::Cma) => u64::MAX,
            (Some(_), ShmMode::Ring) => 0,
            (Some(_), ShmMode::Auto | ShmMode::Off) => {
                stage_from(self.host_ranks.unwrap_or(self.peers.len() + 1))
            }
        }
    }

    /// Turns queued messages into records (filling the ring) and writes what the socket takes.
    fn flush(&mut self, rank: usize, bufs: &Buffers) -> Result<(), TransportError> {
        let stage_from = self.stage_from();
        let p = self.peers.get_mut(&rank).expect("a peer");
        while p.wbuf.len() < RECORD * 256 {
            let Some(o) = p.out.front_mut() else { break };
            let data = matches!(o.message, Message::Data(_)) && !o.payload.is_empty();
            if !data {
                p.wbuf.extend_from_slice(
                    &Record::Message {
                        head: o.head,
                        addr: 0,
                    }
                    .encode(),
                );
                p.out.pop_front();
                continue;
            }
            let buf = bufs
                .get(&o.seq)
                .ok_or_else(|| gone_buffer(rank, o.seq))?
                .as_slice();
            let payload = buf
                .get(o.payload.clone())
                .ok_or_else(|| gone_buffer(rank, o.seq))?;
            if p.attached && (buf.len() as u64) < stage_from {
                p.wbuf.extend_from_slice(
                    &Record::Message {
                        head: o.head,
                        addr: payload.as_ptr() as u64,
                    }
                    .encode(),
                );
                self.cma_bytes += payload.len() as u64;
                p.out.pop_front();
            } else {
                let stage = self
                    .stage
                    .as_mut()
                    .ok_or_else(|| bad(rank, "it reads only our ring, and we have none".into()))?;
                let len = (payload.len() - o.at).min(CHUNK);
                let key = Key {
                    seq: o.seq,
                    at: o.payload.start + o.at,
                    len,
                };
                let Some(pos) = stage.place(key, &payload[o.at..o.at + len]) else {
                    break; // readers still hold the room it needs
                };
                p.announced.push_back(pos);
                p.wbuf.extend_from_slice(
                    &Record::RingChunk {
                        head: o.head,
                        pos,
                        at: o.at as u32,
                        len: len as u32,
                    }
                    .encode(),
                );
                o.at += len;
                if o.at == payload.len() {
                    p.out.pop_front();
                }
            }
        }
        if p.bye_got && !p.bye_sent && p.out.is_empty() {
            // The peer closes the pair: ours follows what we queued before we read its.
            p.bye_sent = true;
            p.wbuf.extend_from_slice(&Record::Goodbye.encode());
        }
        write_out(rank, p)
    }

    /// Handles peer `rank`'s deferred segments whose broadcast was posted since, in their
    /// order (those still early wait again); whether any was. They are in this process's
    /// memory, not on the peer's socket: a round that has some must not wait for the socket
    /// first (that wait, a whole driver round whenever a broadcast followed the one before it
    /// closely enough for its first segment to arrive early, was the 50 ms stall of issue 28).
    fn receive_deferred(
        &mut self,
        rank: usize,
        bufs: &mut Buffers,
        driver: &mut dyn Driver,
        now: u64,
    ) -> crate::Result<bool> {
        let deferred = std::mem::take(&mut self.peers.get_mut(&rank).expect("a peer").deferred);
        let mut handled = false;
        for record in deferred {
            if let Record::Message { head, .. } = &record {
                if let Message::Data(h) = super::decode_header(rank, head)? {
                    if driver.header(rank, &h)? == Landing::Hold {
                        let p = self.peers.get_mut(&rank).expect("a peer");
                        p.deferred.push_back(record);
                        continue;
                    }
                }
            }
            self.handle(rank, record, bufs, driver, now)?;
            handled = true;
        }
        Ok(handled)
    }

    /// Handles the records peer `rank` wrote since the last call.
    fn receive(
        &mut self,
        rank: usize,
        bufs: &mut Buffers,
        driver: &mut dyn Driver,
        now: u64,
    ) -> crate::Result<()> {
        let p = self.peers.get_mut(&rank).expect("a peer");
        let mut chunk = [0u8; RECORD * 64];
        let mut read = 0;
        let mut eof = false;
        while read < READ_BUDGET && !p.closed && !p.ended && !eof {
            match p.stream.read(&mut chunk) {
                Ok(0) => eof = true,
                Ok(n) => {
                    read += n;
                    p.rbuf.extend_from_slice(&chunk[..n]);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => p.closed = true,
                Err(e) => return Err(io_err(Some(rank), e).into()),
            }
        }
        let whole = p.rbuf.len() / RECORD * RECORD;
        let records: Vec<u8> = p.rbuf.drain(..whole).collect();
        for r in records.chunks_exact(RECORD) {
            let record = Record::decode(r).map_err(|e| bad(rank, e.to_string()))?;
            if self.peers[&rank].bye_got && !matches!(record, Record::RingFreed { .. }) {
                return Err(bad(rank, format!("it sent {record:?} after its goodbye")).into());
            }
            self.handle(rank, record, bufs, driver, now)?;
        }
        if eof {
            // After its goodbye (read above) the end is orderly; before it, the peer is gone.
            let p = self.peers.get_mut(&rank).expect("a peer");
            if p.bye_got {
                p.ended = true;
            } else {
                p.closed = true;
            }
        }
        Ok(())
    }

    fn handle(
        &mut self,
        rank: usize,
        record: Record,
        bufs: &mut Buffers,
        driver: &mut dyn Driver,
        now: u64,
    ) -> crate::Result<()> {
        let p = self.peers.get_mut(&rank).expect("a peer");
        match record {
            Record::Goodbye => {
                if p.partial.is_some() {
                    return Err(crate::Error::from(bad(
                        rank,
                        "a goodbye in the middle of a segment".into(),
                    )));
                }
                p.bye_got = true;
            }
            Record::Message { head, addr } => {
                let message = super::decode_header(rank, &head)?;
                let Message::Data(h) = message else {
                    return driver.landed(now, rank, &message);
                };
                if h.len > 0 && !p.attach {
                    return Err(crate::Error::from(bad(
                        rank,
                        "a segment by address, but this rank reads only its ring".into(),
                    )));
                }
                let len = h.len as usize;
                let pid = p.pid;
                match driver.header(rank, &h)? {
                    Landing::Into { seq, range } => {
                        attach(rank, pid, addr, slot(bufs, rank, seq, range)?)?;
                        self.cma_bytes += len as u64;
                        driver.landed(now, rank, &message)?;
                    }
                    Landing::Hold => {
                        // Of a broadcast not posted here yet: its bytes stay in the writer's
                        // buffer until this rank acknowledges them, so the record waits
                        // rather than a copy (a whole message, often, on a host of more ranks
                        // than cores: a 64 MiB allocation, its page faults and a second copy).
                        // A repeat of a record waiting already is dropped: what waits is then
                        // bounded as what the endpoint holds (the window per lane).
                        let repeat = p.deferred.iter().any(
                            |r| matches!(r, Record::Message { head: waits, .. } if *waits == head),
                        );
                        if !repeat {
                            self.deferred_bytes += len as u64;
                            p.deferred.push_back(Record::Message { head, addr });
                        }
                    }
                    Landing::Discard => {}
                }
            }
            Record::RingChunk { head, pos, at, len } => {
                let message = super::decode_header(rank, &head)?;
                let Message::Data(h) = message else {
                    return Err(crate::Error::from(bad(
                        rank,
                        "a ring chunk of a control message".into(),
                    )));
                };
                let Some(rx) = &mut p.rx else {
                    return Err(crate::Error::from(bad(
                        rank,
                        "a ring chunk, but it has no ring here (PIPECAST_SHM=cma)".into(),
                    )));
                };
                rx.populate();
                let rx = &*rx;
                let (at, len, total) = (at as usize, len as usize, h.len as usize);
                if at == 0 && p.partial.is_none() {
                    // Held bytes grow chunk by chunk: a segment is often the whole message.
                    let dest = Dest::of(driver, rank, &h, 0)?;
                    p.partial = Some(Partial {
                        message,
                        len: total,
                        dest,
                        got: 0,
                    });
                }
                let Some(part) = &mut p.partial else {
                    return Err(crate::Error::from(bad(
                        rank,
                        format!("a chunk at {at} of a segment that never began"),
                    )));
                };
                if part.message != message || part.got != at || at + len > total {
                    return Err(crate::Error::from(bad(
                        rank,
                        format!("chunk {at}+{len} out of order for a segment of {total} bytes"),
                    )));
                }
                if let Dest::Hold(v) = &part.dest {
                    // Its broadcast was posted since the segment began: the rest goes straight
                    // into the buffer, and only what came before is copied once more.
                    if let Landing::Into { seq, range } = driver.header(rank, &h)? {
                        slot(bufs, rank, seq, range.start..range.start + v.len())?
                            .copy_from_slice(v);
                        part.dest = Dest::Buffer { seq, range };
                    }
                }
                let off = pos % rx.size() as u64;
                match &mut part.dest {
                    Dest::Buffer { seq, range } => {
                        let streaming = bufs
                            .get(seq)
                            .is_some_and(|b| b.len() >= stream::STREAM_FROM);
                        let dst = slot(bufs, rank, *seq, range.start + at..range.start + at + len)?;
                        rx.read(off, dst, streaming).map_err(|e| bad(rank, e))?;
                    }
                    Dest::Hold(v) => {
                        // Grown chunk by chunk: a segment is often the whole message. Refused
                        // memory is the named error, not an abort (`limits::heap`).
                        if v.try_reserve((at + len).saturating_sub(v.len())).is_err() {
                            let what = format!(
                                "hold segment {} of broadcast {} from rank {rank} until it is \
                                 posted here",
                                h.index, h.seq
                            );
                            return Err(super::limits::heap(&what, (at + len) as u64).into());
                        }
                        v.resize(at + len, 0);
                        rx.read(off, &mut v[at..], false)
                            .map_err(|e| bad(rank, e))?;
                        self.held_bytes += len as u64;
                    }
                    Dest::Discard => {}
                }
                part.got += len;
                let whole = part.got == part.len;
                self.ring_bytes += len as u64;
                // Told at once: the writer waits for every reader of a chunk before it reuses
                // its room for the next.
                p.consumed += 1;
                p.wbuf
                    .extend_from_slice(&Record::RingFreed { chunks: p.consumed }.encode());
                write_out(rank, p)?;
                if whole {
                    let part = p.partial.take().expect("present");
                    part.dest.landed(driver, bufs, now, rank, message)?;
                }
            }
            Record::RingFreed { chunks } => {
                let (Some(stage), Some(new)) = (&mut self.stage, chunks.checked_sub(p.released))
                else {
                    return Err(crate::Error::from(bad(
                        rank,
                        format!("released {chunks} ring chunks after {}", p.released),
                    )));
                };
                if new > p.announced.len() as u64 {
                    return Err(crate::Error::from(bad(
                        rank,
                        format!(
                            "released {new} more ring chunks, but holds only {}",
                            p.announced.len()
                        ),
                    )));
                }
                for pos in p.announced.drain(..new as usize) {
                    stage.release(pos).map_err(|e| bad(rank, e))?;
                }
                p.released = chunks;
            }
            r => {
                return Err(crate::Error::from(bad(
                    rank,
                    format!("unexpected after setup: {r:?}"),
                )))
            }
        }
        Ok(())
    }

    /// Fails if a peer that a broadcast in flight waits for is gone.
    fn check_closed(&self, driver: &dyn Driver) -> Result<(), TransportError> {
        if self.gone.is_empty() && !self.peers.values().any(|p| p.closed) {
            return Ok(());
        }
        if let Some((peer, why)) = driver
            .waiting_for()
            .into_iter()
            .find_map(|p| Some((p, self.gone.get(&p)?)))
        {
            return Err(why.error(peer));
        }
        super::check_closed(driver, |r| self.peers.get(&r).is_some_and(|p| p.closed))
    }

    fn modes(&self) -> String {
        if self.peers.is_empty() {
            return self.expected.into();
        }
        let cma = self.peers.values().any(|p| p.attach);
        let ring = self.peers.values().any(|p| !p.attach);
        match (cma, ring) {
            (true, true) => "cma+ring",
            (false, true) => "ring",
            _ => "cma",
        }
        .into()
    }
}

impl Link for ShmLink {
    fn describe(&self) -> String {
        format!("shm:{}", self.modes())
    }

    /// Starts setting up a pair with each of `peers` (on this host) not set up yet, without
    /// waiting: the poll loop finishes them (`progress`, [`setup`]), and messages to a peer
    /// whose setup is under way wait in the engine. A peer whose socket refuses is gone, an
    /// error for the broadcasts that need it; a late one is waited for.
    fn connect(&mut self, peers: &[usize], timeout: Duration) -> Result<(), TransportError> {
        self.connect_timeout = setup::connect_timeout(timeout);
        for &p in peers {
            self.serves.insert(p);
            self.busy_at = None; // what it serves changed: recomputed next round
            self.dial(p)?;
        }
        Ok(())
    }

    /// While its pairs are bounded (`PIPECAST_MAX_CONNECTIONS` given) and it has some: a
    /// peer may say goodbye at any time, and a closing pair keeps its descriptor until each
    /// rank read the other's end (`close.rs`). Served between broadcasts (the progress
    /// thread's idle round waits on the pairs' streams), a close completes as soon as its
    /// records arrive, not at this rank's or its peer's next broadcast. Unbounded, the
    /// default, no pair is ever closed and nothing needs serving.
    fn serves_idle(&self) -> bool {
        self.max_pairs != usize::MAX && !(self.peers.is_empty() && self.pairs.is_empty())
    }

    /// Reliable; one-sided where the reader attaches to the writer's memory.
    fn capabilities(&self) -> super::Capabilities {
        super::Capabilities {
            one_sided: if self.peers.is_empty() {
                self.expected == "cma"
            } else {
                self.peers.values().any(|p| p.attach)
            },
            ..super::Capabilities::default()
        }
    }

    fn progress(
        &mut self,
        bufs: &mut Buffers,
        driver: &mut dyn Driver,
        clock: &dyn Fn() -> u64,
        wait: Duration,
    ) -> crate::Result<()> {
        self.rounds += 1;
        if self.setting_up() {
            self.advance()?;
        }
        self.follow(driver);
        let ranks: Vec<usize> = self.peers.keys().copied().collect();
        let mut landed = false;
        for &r in &ranks {
            landed |= self.receive_deferred(r, bufs, driver, clock())?;
        }
        self.queue(driver, clock())?;
        self.check_closed(driver)?;
        // Only while a broadcast talks to peers here: a round between broadcasts (served to
        // finish closes) closing more would close the pairs the next broadcast sets up again
        // (measured: twice the closes, docs/shm.md).
        if !self.busy.is_empty() {
            self.trim()?;
        }
        for &r in &ranks {
            self.flush(r, bufs)?;
        }
        // Records read with a pair's last handshake record are in memory, not on the socket.
        let records = self.peers.values().any(|p| p.rbuf.len() >= RECORD);
        let wait = if landed || records {
            Duration::ZERO
        } else {
            driver.may_wait(wait)
        };
        // A listener's full queue is retried soon, not after a whole round.
        let wait = if self
            .pairs
            .values()
            .any(|s| matches!(s, Pair::Dialling { .. }))
        {
            wait.min(Duration::from_millis(10))
        } else {
            wait
        };
        if !wait.is_zero() {
            self.knocked |= self.wait(&ranks, wait)?;
        }
        // The listener only when a peer may be knocking: its connection seen by the wait, or
        // once every `LISTEN_EVERY` rounds that did not wait (not an `accept` per round).
        if self.setting_up() || self.knocked || self.rounds % LISTEN_EVERY == 0 {
            self.knocked = false;
            self.advance()?;
        }
        let ranks: Vec<usize> = self.peers.keys().copied().collect();
        for &r in &ranks {
            self.receive(r, bufs, driver, clock())?;
        }
        self.queue(driver, clock())?;
        self.check_closed(driver)?;
        for &r in &ranks {
            self.flush(r, bufs)?;
        }
        self.reap()?;
        self.unwatch_closed();
        Ok(())
    }

    fn set_wake(&mut self, fd: RawFd) {
        self.wake = Some(fd);
    }

    fn wait_fd(&self) -> Option<RawFd> {
        Some(self.epoll.as_raw_fd())
    }

    fn counters(&self) -> BTreeMap<String, u64> {
        BTreeMap::from([
            ("shm_cma_bytes".to_string(), self.cma_bytes),
            ("shm_ring_bytes".to_string(), self.ring_bytes),
            ("shm_deferred_bytes".to_string(), self.deferred_bytes),
            ("shm_held_bytes".to_string(), self.held_bytes),
            ("shm_pairs".to_string(), self.peers.len() as u64),
            ("shm_idle_closes".to_string(), self.idle_closes),
            ("shm_closes".to_string(), self.closes),
            (
                "shm_staged_bytes".to_string(),
                self.stage.as_ref().map_or(0, Stage::written),
            ),
        ])
    }

    fn describe_state(&self, _now: u64) -> String {
        let mut out = format!("shm ({})", self.modes());
        for (r, p) in &self.peers {
            if p.out.is_empty()
                && p.wbuf.is_empty()
                && p.partial.is_none()
                && p.deferred.is_empty()
                && !p.closed
                && !p.closing()
            {
                continue;
            }
            out += &format!(
                "\n  peer {r}: {} messages queued, {} record bytes unwritten, mid-segment {}, {} segments of later broadcasts waiting, closed {}, goodbye sent {} read {}",
                p.out.len(),
                p.wbuf.len(),
                p.partial.is_some(),
                p.deferred.len(),
                p.closed,
                p.bye_sent,
                p.bye_got
            );
        }
        for (r, pair) in &self.pairs {
            out += &match pair {
                Pair::Dialling { .. } => {
                    format!("\n  peer {r}: setting up, its listener's queue full")
                }
                Pair::Open(c) => format!("\n  peer {r}: setting up, {}", c.state()),
            };
        }
        if !self.knocks.is_empty() {
            out += &format!(
                "\n  {} accepted connections awaiting a hello",
                self.knocks.len()
            );
        }
        for (r, why) in &self.gone {
            out += &format!("\n  peer {r}: {}", why.error(*r));
        }
        out
    }

    /// Closes every stream and the listener: peers see end-of-file, or a refused or reset
    /// connection, and fail their broadcast at once.
    fn shutdown(&mut self) {
        for p in self.peers.values() {
            p.stream.shutdown(std::net::Shutdown::Both).ok();
        }
        self.peers.clear();
        self.pairs.clear();
        self.knocks.clear();
        self.leftover.clear();
        self.listener = None;
    }
}

impl ShmLink {
    /// Waits up to `wait` for a peer's records, room to write, a setup's records or
    /// connection, or the wake descriptor; whether the listener has a connection queued.
    fn wait(&self, ranks: &[usize], wait: Duration) -> Result<bool, TransportError> {
        let mut fds: Vec<libc::pollfd> = ranks
            .iter()
            .map(|r| {
                let p = &self.peers[r];
                libc::pollfd {
                    fd: if p.closed || p.ended {
                        -1
                    } else {
                        p.stream.as_raw_fd()
                    },
                    events: libc::POLLIN | if p.wbuf.is_empty() { 0 } else { libc::POLLOUT },
                    revents: 0,
                }
            })
            .collect();
        let setting_up = self
            .pairs
            .values()
            .filter_map(|s| match s {
                Pair::Open(c) => Some(c.fd()),
                Pair::Dialling { .. } => None,
            })
            .chain(self.knocks.iter().map(Knock::fd))
            .chain(self.listener.as_ref().map(|l| l.as_raw_fd()));
        for fd in setting_up {
            fds.push(libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            });
        }
        fds.push(libc::pollfd {
            fd: self.wake.unwrap_or(-1),
            events: libc::POLLIN,
            revents: 0,
        });
        // The descriptors stay open for the calls (owned by `self.peers` and the progress
        // thread); -1 entries are ignored. Interrupted: nothing ready.
        let poll =
            |fds: &mut [libc::pollfd], wait: Duration| crate::transport::poll::poll(fds, wait);
        // A peer of the same host usually answers within microseconds: poll before sleeping.
        spin(self.poll.min(wait), || {
            match poll(&mut fds, Duration::ZERO) {
                Ok(0) => None,
                ready => Some(ready),
            }
        })
        .unwrap_or_else(|| poll(&mut fds, wait))
        .map_err(|e| io_err(None, e))?;
        // The listener is polled last before the wake descriptor.
        let listener = self.listener.is_some() && fds.len() >= 2;
        Ok(listener && fds[fds.len() - 2].revents != 0)
    }
}

/// From which message size (bytes) a writer on a host of `ranks` ranks sends its segments
/// through its staging ring even to readers that could attach to its buffer: many readers'
/// cross-memory attaches of one writer (each pinning its pages, each reading the whole
/// message from memory at its own pace) cost more there than a shared staging ring (1 + k
/// copies, each out of the shared cache). Measured with `bench/shm_fanout.sh` and
/// `bench/local_ompi.sh` (docs/shm.md): from 16 MiB the ring was ahead with 3, 4 and 8 ranks
/// (4 ranks under Open MPI: 2.2–4.0 × Open MPI's own broadcast against 1.5–2.3 × by attach),
/// and, once `pipecast bench` stopped timing other ranks' checks (session 13), from 2 MiB too
/// (3, 4 and 8 ranks, 3–4 rounds; 4 ranks under Open MPI at 4 and 8 MiB, 6 rounds: medians
/// 2.50 and 2.39 × Open MPI's own against 2.19 and 2.01 × by attach). It starts at 4 MiB, the
/// smallest broadcast the MPI glue gives pipecast on one host by default.
///
/// With 2 ranks (one reader) the ring is one copy more than attach, but the writer's copy in
/// and the reader's copy out run on two cores at once, each at memcpy speed: from 32 MiB that
/// beat Open MPI's own two-rank broadcast (one cross-memory attach) in every round under OSU's
/// `osu_bcast` (session 14, `bench/osu_local.sh`: 1.18–1.73 × at 32 MiB, 1.46–3.31 × at
/// 64 MiB, 12 rounds each), and lost at 16 MiB in 11 of 12 (0.58–1.66 ×, median 0.76), where
/// Open MPI's single copy still runs near memcpy speed on this host
/// (`comm::FEW_READERS_MIN_BYTES`). `u64::MAX`: never.
pub fn stage_from(ranks: usize) -> u64 {
    match ranks {
        0 | 1 => u64::MAX,
        2 => ONE_READER_STAGE_MIN_BYTES,
        _ => STAGE_MIN_BYTES,
    }
}

const STAGE_MIN_BYTES: u64 = 4 << 20;
/// Where one reader's broadcasts move to the staging ring; the MPI glue leaves two-rank
/// broadcasts below it to the MPI (`comm::FEW_READERS_MIN_BYTES` is this value).
pub const ONE_READER_STAGE_MIN_BYTES: u64 = 32 << 20;

/// `send(2)` without SIGPIPE (a library inside an MPI program cannot count on it being
/// ignored): a closed peer is an error code, not a signal.
fn send(stream: &UnixStream, bytes: &[u8]) -> io::Result<usize> {
    // SAFETY: reads `bytes.len()` bytes from a live slice; the descriptor is open.
    let n = unsafe {
        libc::send(
            stream.as_raw_fd(),
            bytes.as_ptr().cast(),
            bytes.len(),
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Writes what the socket takes of `bytes` now, without waiting: how many bytes went, or
/// `None` when the peer closed its end (a broken pipe or a reset: a gone peer, found when its
/// stream is read). The one write loop of the link, its setup's records and its peers' alike.
fn write_some(stream: &UnixStream, bytes: &[u8]) -> io::Result<Option<usize>> {
    let mut sent = 0;
    while sent < bytes.len() {
        match send(stream, &bytes[sent..]) {
            Ok(0) => return Ok(None),
            Ok(n) => sent += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
                ) =>
            {
                return Ok(None)
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Some(sent))
}

fn write_out(rank: usize, p: &mut Peer) -> Result<(), TransportError> {
    if p.wbuf.is_empty() || p.closed {
        return Ok(());
    }
    match write_some(&p.stream, &p.wbuf).map_err(|e| io_err(Some(rank), e))? {
        Some(n) => {
            p.wbuf.drain(..n);
        }
        None => p.closed = true,
    }
    Ok(())
}

/// Reads a segment from peer `rank`'s memory; a peer whose process is gone is `Closed`.
fn attach(rank: usize, pid: i32, addr: u64, dst: &mut [u8]) -> Result<(), TransportError> {
    if dst.is_empty() {
        return Ok(());
    }
    cma::read(pid, addr, dst).map_err(|e| match e.raw_os_error() {
        Some(libc::ESRCH) => TransportError::Closed { peer: rank },
        _ => bad(rank, format!("cannot read its segment at {addr:#x}: {e}")),
    })
}

fn bad(peer: usize, reason: String) -> TransportError {
    TransportError::BadFrame { peer, reason }
}

fn io_err(peer: Option<usize>, e: io::Error) -> TransportError {
    TransportError::Io {
        peer,
        error: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fan_outs_are_staged_from_4_mib_and_to_one_reader_from_32_mib() {
        assert_eq!(stage_from(1), u64::MAX, "no reader");
        assert_eq!(
            stage_from(2),
            32 << 20,
            "one reader: attach below 32 MiB, one copy"
        );
        for ranks in [3, 4, 8, 64] {
            assert_eq!(stage_from(ranks), 4 << 20, "{ranks} ranks");
        }
    }

    /// Two links of one process (threads) connect; they attach to each other's memory (same
    /// process), or use the ring when forced.
    fn pair(mode: ShmMode) -> (ShmLink, ShmLink) {
        let tag: u64 = rand::random();
        let names: Vec<String> = (0..2)
            .map(|r| format!("pipecast.test.{tag:x}.{r}"))
            .collect();
        let poll = Duration::from_micros(50);
        let mut a = ShmLink::bind(0, &names[0], mode, poll).unwrap();
        let mut b = ShmLink::bind(1, &names[1], mode, poll).unwrap();
        a.set_peers(names.clone(), 7);
        b.set_peers(names, 7);
        a.connect(&[1], Duration::from_secs(10)).unwrap();
        b.connect(&[0], Duration::from_secs(10)).unwrap();
        set_up(&mut [&mut a, &mut b]);
        (a, b)
    }

    /// Moves the links' setups on until every pair under way is set up (or a peer gone).
    pub(super) fn set_up(links: &mut [&mut ShmLink]) {
        for _ in 0..10_000 {
            for l in links.iter_mut() {
                l.advance().unwrap();
            }
            if links
                .iter()
                .all(|l| l.pairs.is_empty() && l.knocks.is_empty())
            {
                return;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        panic!("the pairs were not set up");
    }

    #[test]
    fn links_of_one_host_attach_or_use_the_ring() {
        let (a, b) = pair(ShmMode::Auto);
        assert_eq!(a.describe(), "shm:cma");
        assert_eq!(b.describe(), "shm:cma");
        let caps = a.capabilities();
        assert!(caps.reliable && caps.one_sided && caps.max_frame.is_none());
        let (a, _b) = pair(ShmMode::Ring);
        assert_eq!(a.describe(), "shm:ring");
        assert!(!a.capabilities().one_sided);
    }

    /// Rank 1 posts the broadcast only after rank 0's first records came: by address, the
    /// records wait for it and no byte is copied aside; through the ring, only the chunks that
    /// came before the posting are (a full ring's worth), the rest go straight into the buffer.
    #[test]
    fn a_late_reader_copies_nothing_or_only_what_came_early() {
        use crate::engine::drive::Engine;
        use crate::engine::{Bcast, Config, Setup};
        use crate::transport::Buffer;
        let n = (RING_BYTES + RING_BYTES / 2) * 2 + 5;
        let data = crate::testing::pattern(n, 0);
        // By address: `cma` (`auto` stages a message this large, `stage_from`).
        for mode in [ShmMode::Cma, ShmMode::Ring] {
            let (a, b) = pair(mode);
            let mut links = [a, b];
            let mut endpoints = [Engine::new(), Engine::new()];
            let mut bufs = [Buffers::new(), Buffers::new()];
            let setup = Setup {
                seq: 1,
                root: 0,
                msize: n as u64,
                segment: n as u64,
                deep: false,
            };
            let lanes = [crate::plan::baseline::flat(2, 0)];
            let start = std::time::Instant::now();
            let clock = move || start.elapsed().as_nanos() as u64;
            let post = |me: usize, endpoints: &mut [Engine; 2], bufs: &mut [Buffers; 2]| {
                let b = Bcast::new(me, &lanes, setup, Config::default(), 0).unwrap();
                let buf = if me == 0 { data.clone() } else { vec![0; n] };
                bufs[me].insert(1, Buffer::Owned(buf));
                let buf = bufs[me].get_mut(&1).unwrap().as_mut_slice();
                endpoints[me].post(b, buf, clock()).unwrap();
            };
            post(0, &mut endpoints, &mut bufs);
            let mut rounds = 0;
            while !(endpoints[0].is_done(1) && endpoints[1].is_done(1)) {
                rounds += 1;
                assert!(rounds < 100_000, "{mode}: no end");
                if rounds == 2 {
                    post(1, &mut endpoints, &mut bufs);
                }
                for me in 0..2 {
                    links[me]
                        .progress(&mut bufs[me], &mut endpoints[me], &clock, Duration::ZERO)
                        .unwrap();
                }
            }
            let Some(Buffer::Owned(got)) = bufs[1].remove(&1) else {
                panic!("the buffer is there")
            };
            assert!(got == data, "{mode}: wrong bytes");
            let c = links[1].counters();
            if mode == ShmMode::Ring {
                assert_eq!(c["shm_deferred_bytes"], 0);
                assert!(c["shm_held_bytes"] > 0, "{mode}: {c:?}");
                assert!(c["shm_held_bytes"] <= RING_BYTES as u64, "{mode}: {c:?}");
                assert_eq!(c["shm_ring_bytes"], n as u64, "{mode}: {c:?}");
            } else {
                assert_eq!(c["shm_deferred_bytes"], n as u64, "{mode}: {c:?}");
                assert_eq!(c["shm_held_bytes"], 0, "{mode}: {c:?}");
                assert_eq!(c["shm_cma_bytes"], n as u64, "{mode}: {c:?}");
            }
        }
    }

    #[test]
    fn modes_parse_and_print_back() {
        for m in ["auto", "cma", "ring", "off"] {
            assert_eq!(m.parse::<ShmMode>().unwrap().to_string(), m);
        }
        assert!("shm"
            .parse::<ShmMode>()
            .unwrap_err()
            .contains("auto, cma, ring or off"));
    }
}
