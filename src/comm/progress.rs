//! The progress thread: one loop per process joins the engine's [`Engine`] (every broadcast
//! in flight, of every communicator on it), its link and the real clock. A communicator's
//! broadcasts are posted in the order the caller posts them (the same at every rank: MPI's
//! rule, per communicator), several may run at once, and the link is served between
//! broadcasts too (a lossy link's acknowledgements and heartbeats), so a rank that computes
//! while others broadcast is late, never gone. A dropped communicator is forgotten once its
//! broadcasts are over ([`Op::Close`]).

use super::link::BoxedLink;
use super::multicast::Multicast;
use super::CommError;
use crate::engine::drive::{round_wait, Engine};
use crate::engine::number::comm_of;
use crate::engine::{Bcast, Config as EngineConfig, Setup};
use crate::plan::Lane;
use crate::transport::wake::spin;
use crate::transport::{Buffer, Buffers, Wake};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One engine run: a broadcast (or a barrier phase).
pub struct Job {
    pub lanes: Arc<Vec<Lane>>,
    /// The rail each lane runs on (`Plan::rails`; empty: all on rail 0).
    pub rails: Arc<Vec<usize>>,
    pub setup: Setup,
    /// The root as every member names it (its rank in the communicator): what the segments'
    /// headers carry, the same at every member whatever the engine's numbering
    /// ([`Bcast::with_root_name`]).
    pub root_name: u32,
    pub engine: EngineConfig,
    pub connect_timeout: Duration,
    /// Sent to the job's multicast group (`lanes` are then the ack tree; `comm::multicast`).
    pub multicast: bool,
}

/// How a run ended: its duration (ns) or error, and an owned buffer back.
pub struct Outcome {
    pub result: crate::Result<u64>,
    pub buf: Option<Vec<u8>>,
}

pub enum Op {
    /// Runs `jobs` one after the other on `buf` (a barrier is two jobs: its release may only
    /// start once everybody arrived).
    Run {
        buf: Buffer,
        jobs: Vec<Job>,
        reply: Sender<Outcome>,
    },
    /// The counters of every link in use by name (monotonic; `Link::counters`: TCP has
    /// some only on several rails).
    Counters {
        reply: Sender<BTreeMap<String, u64>>,
    },
    /// Communicator `comm` was dropped: once it has no broadcast in flight (at once when it
    /// has none), the endpoint forgets it and its id leaves `ids` (free for a new
    /// communicator). `reply` answers when the note is taken, not when it is done.
    Close {
        comm: u32,
        ids: Arc<Mutex<BTreeSet<u32>>>,
        reply: Sender<()>,
    },
    /// The setup agreed on multicast: from now on broadcasts may run on it, and its carrier
    /// is served between broadcasts too (a late rank answers the root's syncs).
    Multicast(Box<Multicast>),
    /// Processes a communicator joined on this engine brings (`comm::grow`): the link
    /// appends them to its peers ([`Link::grow`](crate::transport::Link::grow)); `reply`
    /// answers once it did, or why it could not.
    Grow {
        peers: Vec<crate::transport::NewPeer>,
        reply: Sender<Result<(), String>>,
    },
}

/// A posted run: the jobs still to start, and whom to tell.
struct Run {
    jobs: VecDeque<Job>,
    reply: Sender<Outcome>,
    started: u64,
    /// Whether this run's state was logged as stalled ([`STALL_REPORT`]).
    reported: bool,
}

/// Between broadcasts, on a link that must keep answering peers.
const IDLE_ROUND: Duration = Duration::from_millis(50);
/// While only multicast receivers are at work (`Multicast::coalesce`), the link's round runs
/// this often, not after every pause: that round (the link's poll list rebuilt and polled,
/// its timers, small allocations) was a fifth of a receiving rank's CPU at one per ≤ 1 ms
/// pause (docs/multicast.md, "Receivers' CPU"). Nothing of the link's is in flight then.
const RECEIVING_LINK_ROUND: Duration = Duration::from_millis(10);
/// A run still going after this long logs the engine's and the link's state once (at warn):
/// a late rank is waited for without limit, and this says for what.
const STALL_REPORT: Duration = Duration::from_secs(30);

struct Driver {
    me: usize,
    link: BoxedLink,
    endpoint: Engine,
    bufs: Buffers,
    /// By the sequence number of the job running now.
    runs: BTreeMap<u64, Run>,
    start: Instant,
    /// After a failure every later broadcast fails too: peers saw this rank close its links,
    /// and a rank must never go on alone.
    failed: Option<String>,
    /// The link needs each broadcast's buffer registered while it runs (RDMA verbs).
    registers: bool,
    /// The longest a round waits for the link while broadcasts run (`Config::round`; a newly
    /// posted broadcast ends the wait at once through the [`Wake`]).
    round: Duration,
    /// Communicators dropped while their broadcasts ran, to forget when those end.
    closing: BTreeMap<u32, Arc<Mutex<BTreeSet<u32>>>>,
    /// The multicast broadcasts, once the setup agreed on a carrier.
    mcast: Option<Multicast>,
    /// What the link waits on in place of the wake descriptor when multicast may run: an
    /// epoll holding it and the carrier's descriptors (kept as long as the link).
    _waits: Option<std::os::fd::OwnedFd>,
    /// When the link's round is due while only multicast receivers work
    /// ([`RECEIVING_LINK_ROUND`]; ns since `start`).
    link_due: u64,
}

/// The progress thread's settings, from the agreed configuration.
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    /// How long it polls for the next op before it sleeps (`Config::poll`).
    pub poll: Duration,
    /// The longest a round waits for the link while broadcasts run (`Config::round`).
    pub round: Duration,
    /// R, every broadcast's window (`Config::engine.window`, agreed at every rank): the most
    /// a peer may send per lane of a broadcast not posted here (`Endpoint::with_window`).
    pub window: u32,
}

/// Serves `ops` until the communicator drops its end.
pub fn serve(
    me: usize,
    link: BoxedLink,
    ops: Receiver<Op>,
    wake: Arc<Wake>,
    waits: Option<std::os::fd::OwnedFd>,
    tuning: Tuning,
) {
    let Tuning {
        poll,
        round,
        window,
    } = tuning;
    let registers = link.capabilities().needs_registration;
    let mut d = Driver {
        me,
        registers,
        round,
        link,
        endpoint: Engine::with_window(window),
        bufs: Buffers::new(),
        runs: BTreeMap::new(),
        start: Instant::now(),
        failed: None,
        closing: BTreeMap::new(),
        mcast: None,
        _waits: waits,
        link_due: 0,
    };
    loop {
        wake.clear();
        let busy = !d.runs.is_empty();
        let idle_serves = d.link.serves_idle() || d.mcast.is_some();
        let op = if busy || (d.failed.is_none() && idle_serves) {
            match ops.try_recv() {
                Ok(op) => Some(op),
                Err(TryRecvError::Empty) => None,
                Err(TryRecvError::Disconnected) => break,
            }
        } else if let Some(op) = spin(poll, || ops.try_recv().ok()) {
            // Polled for a while first: the next broadcast often follows at once.
            Some(op)
        } else {
            match ops.recv_timeout(Duration::from_secs(3600)) {
                Ok(op) => Some(op),
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => break,
            }
        };
        match op {
            Some(Op::Run { buf, jobs, reply }) => d.post(buf, jobs, reply),
            Some(Op::Counters { reply }) => {
                let mut counters = d.link.counters();
                if let Some(m) = &d.mcast {
                    counters.extend(m.counters());
                }
                reply.send(counters).ok();
            }
            Some(Op::Multicast(m)) => {
                tracing::info!(rank = me, "multicast broadcasts over {}", m.describe());
                d.mcast = Some(*m);
            }
            Some(Op::Grow { peers, reply }) => {
                let grown = match &d.failed {
                    Some(why) => Err(format!("the engine failed: {why}")),
                    None => d.link.grow(&peers).map_err(|e| e.to_string()),
                };
                reply.send(grown).ok();
            }
            Some(Op::Close { comm, ids, reply }) => {
                d.closing.insert(comm, ids);
                d.forget_closed();
                reply.send(()).ok();
            }
            None if d.failed.is_none() => d.round(),
            None => {}
        }
    }
    d.fail_all("the communicator is gone");
    d.link.shutdown();
}

impl Driver {
    fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// Forgets the dropped communicators that have no run left: the endpoint lets their
    /// sequence numbers start again, and their ids are free.
    fn forget_closed(&mut self) {
        let runs = &self.runs;
        let over: Vec<u32> = self
            .closing
            .keys()
            .copied()
            .filter(|&c| !runs.keys().any(|&seq| comm_of(seq) == c))
            .collect();
        for comm in over {
            let ids = self.closing.remove(&comm).expect("listed");
            self.endpoint.forget(comm);
            if let Some(m) = self.mcast.as_mut() {
                m.forget(comm);
            }
            ids.lock().unwrap_or_else(|e| e.into_inner()).remove(&comm);
        }
    }

    /// Posts the first job of a run (the others start when it completes).
    fn post(&mut self, buf: Buffer, jobs: Vec<Job>, reply: Sender<Outcome>) {
        let mut run = Run {
            jobs: jobs.into(),
            reply,
            started: self.now(),
            reported: false,
        };
        let Some(job) = run.jobs.pop_front() else {
            run.reply
                .send(Outcome {
                    result: Ok(0),
                    buf: buf.into_owned(),
                })
                .ok();
            return;
        };
        if let Some(why) = &self.failed {
            run.reply
                .send(Outcome {
                    result: Err(CommError::Failed(why.clone()).into()),
                    buf: buf.into_owned(),
                })
                .ok();
            return;
        }
        let seq = job.setup.seq;
        self.bufs.insert(seq, buf);
        self.runs.insert(seq, run);
        if let Err(e) = self.start_job(job) {
            self.fail(e);
        }
    }

    /// Hands broadcast `seq`'s buffer (just posted) to a link that registers buffers.
    fn register(&mut self, seq: u64) -> crate::Result<()> {
        if self.registers {
            let buf = self.bufs.get(&seq).expect("a posted run has a buffer");
            self.link.register(seq, buf)?;
        }
        Ok(())
    }

    /// Takes broadcast `seq`'s buffer back (finished or failed), deregistering it first.
    fn take_buf(&mut self, seq: u64) -> Option<Buffer> {
        let buf = self.bufs.remove(&seq);
        if self.registers && buf.is_some() {
            self.link.deregister(seq);
        }
        buf
    }

    /// Starts one job (its buffer posted under its sequence number): the link registers the
    /// buffer if it must, then the engine joins the endpoint, which delivers what arrived
    /// early.
    fn start_job(&mut self, job: Job) -> crate::Result<()> {
        let seq = job.setup.seq;
        self.register(seq)?;
        let now = self.now();
        if job.multicast {
            let Some(m) = self.mcast.as_mut() else {
                return Err(CommError::Usage(format!(
                    "broadcast {seq} asked for multicast, which the setup did not agree on"
                ))
                .into());
            };
            return m.start(seq, job.setup.root, job.setup.msize, now, &mut self.bufs);
        }
        let bcast = Bcast::new(self.me, &job.lanes, job.setup, job.engine, now)?
            .with_rails(job.rails.to_vec())
            .with_root_name(job.root_name);
        self.link.connect(&bcast.peers(), job.connect_timeout)?;
        let buf = self
            .bufs
            .get_mut(&seq)
            .expect("a posted run has a buffer")
            .as_mut_slice();
        self.endpoint.post(bcast, buf, now)?;
        Ok(())
    }

    /// One round of the link, then completions.
    fn round(&mut self) {
        // A broadcast can be over before the link did anything (everything it needed arrived
        // before it was posted): then the link must not wait.
        let mut wait = round_wait(
            &self.endpoint,
            if self.runs.is_empty() {
                IDLE_ROUND
            } else {
                self.round
            },
        );
        let mut serve_link = true;
        if let Some(m) = &self.mcast {
            let now = self.now();
            if let Some(w) = m.wait(now) {
                wait = wait.min(w);
            }
            // Only multicast receivers at work: let frames gather (bounded; a broadcast
            // posted meanwhile starts at most that late), then serve the carrier alone unless
            // the link's round is due.
            if let Some(pause) = m.coalesce(now) {
                if self.runs.keys().all(|&seq| m.runs(seq)) {
                    std::thread::sleep(pause);
                    wait = Duration::ZERO;
                    serve_link = now >= self.link_due;
                }
            }
        }
        let start = self.start;
        let clock = move || start.elapsed().as_nanos() as u64;
        if serve_link {
            self.link_due = clock().saturating_add(RECEIVING_LINK_ROUND.as_nanos() as u64);
        }
        let result = if serve_link {
            self.endpoint
                .handle_timeout(clock())
                .map_err(crate::Error::from)
                .and_then(|()| {
                    self.link
                        .progress(&mut self.bufs, &mut self.endpoint, &clock, wait)
                })
        } else {
            Ok(())
        }
        .and_then(|()| match self.mcast.as_mut() {
            Some(m) => m.drive(&clock, &mut self.bufs),
            None => Ok(()),
        });
        if let Err(e) = result {
            self.fail(e);
            return;
        }
        self.report_stalls();
        let done: Vec<u64> = self
            .runs
            .keys()
            .copied()
            .filter(|&seq| {
                self.endpoint.is_done(seq) || self.mcast.as_ref().is_some_and(|m| m.is_done(seq))
            })
            .collect();
        for seq in done {
            match self.mcast.as_mut() {
                Some(m) if m.runs(seq) => m.finish(seq),
                _ => {
                    self.endpoint.finish(seq);
                }
            }
            let mut run = self.runs.remove(&seq).expect("listed");
            let buf = self.take_buf(seq).expect("a run has a buffer");
            match run.jobs.pop_front() {
                Some(next) => {
                    let next_seq = next.setup.seq;
                    self.bufs.insert(next_seq, buf);
                    self.runs.insert(next_seq, run);
                    if let Err(e) = self.start_job(next) {
                        self.fail(e);
                        return;
                    }
                }
                None => {
                    let elapsed = self.now() - run.started;
                    if !self.closing.is_empty() {
                        // Before the reply: whoever waited for it may reuse the id at once.
                        self.forget_closed();
                    }
                    run.reply
                        .send(Outcome {
                            result: Ok(elapsed),
                            buf: buf.into_owned(),
                        })
                        .ok();
                }
            }
        }
    }

    /// Logs the state once for each run going on for longer than [`STALL_REPORT`].
    fn report_stalls(&mut self) {
        let now = self.now();
        let stalled: Vec<u64> = self
            .runs
            .iter()
            .filter(|(_, r)| {
                !r.reported && now.saturating_sub(r.started) > STALL_REPORT.as_nanos() as u64
            })
            .map(|(&seq, _)| seq)
            .collect();
        if stalled.is_empty() {
            return;
        }
        for seq in &stalled {
            self.runs.get_mut(seq).expect("listed").reported = true;
        }
        let mcast = match &self.mcast {
            Some(m) => format!("\n{}", m.describe_running()),
            None => String::new(),
        };
        tracing::warn!(
            rank = self.me,
            "broadcasts {stalled:?} still running after {STALL_REPORT:?}, waiting for ranks {:?}: {}\n{}{mcast}",
            self.endpoint.waiting_for(),
            self.endpoint.describe(),
            self.link.describe_state(now)
        );
    }

    /// A broadcast failed: report the state, close the link so that peers fail too, and fail
    /// every run in flight.
    fn fail(&mut self, e: crate::Error) {
        tracing::error!(rank = self.me, error = %e, "broadcast failed; closing this rank's links so that its peers fail too");
        tracing::warn!(
            rank = self.me,
            "state at the failure: {}\n{}",
            self.endpoint.describe(),
            self.link.describe_state(self.now())
        );
        self.link.shutdown();
        let why = e.to_string();
        self.failed = Some(why.clone());
        // The first run in flight gets the error itself, the others that the communicator
        // failed.
        let mut first = Some(e);
        if let Some(m) = self.mcast.as_mut() {
            m.clear();
        }
        for (seq, run) in std::mem::take(&mut self.runs) {
            self.endpoint.finish(seq);
            let result = match first.take() {
                Some(e) => Err(e),
                None => Err(CommError::Failed(why.clone()).into()),
            };
            let buf = self.take_buf(seq).and_then(Buffer::into_owned);
            run.reply.send(Outcome { result, buf }).ok();
        }
        self.forget_closed();
    }

    fn fail_all(&mut self, why: &str) {
        for (seq, run) in std::mem::take(&mut self.runs) {
            let buf = self.take_buf(seq).and_then(Buffer::into_owned);
            run.reply
                .send(Outcome {
                    result: Err(CommError::Failed(why.into()).into()),
                    buf,
                })
                .ok();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{self, TreeKind};
    use crate::testing::pattern;
    use crate::topology::Topology;
    use crate::transport::recording::{Event, Recording};
    use crate::transport::{Link as _, TcpTransport};
    use std::sync::Mutex;

    fn job(seq: u64, msize: u64) -> Job {
        let lanes = plan::build(&Topology::single_switch(2), 0, &TreeKind::NaiveLinear, None)
            .unwrap()
            .lanes;
        Job {
            lanes: Arc::new(lanes),
            rails: Arc::default(),
            root_name: 0,
            setup: Setup {
                seq,
                root: 0,
                msize,
                segment: 4096,
                deep: false,
            },
            engine: EngineConfig::default(),
            connect_timeout: Duration::from_secs(10),
            multicast: false,
        }
    }

    /// Checks rank `rank`'s log: every buffer a round saw was registered, each broadcast in
    /// `seqs` was registered once (with `len` bytes) before any round that moved its data
    /// and deregistered once after the last.
    fn check(log: &[Event], seqs: &[(u64, usize)], rank: usize) {
        assert!(
            !log.iter().any(|e| matches!(e, Event::Unregistered(_))),
            "rank {rank}: a round ran with an unregistered buffer: {log:?}"
        );
        for &(seq, len) in seqs {
            let at = |want: &Event| -> Vec<usize> {
                (0..log.len()).filter(|&i| log[i] == *want).collect()
            };
            let reg = at(&Event::Register(seq, len));
            let dereg = at(&Event::Deregister(seq));
            assert_eq!(
                (reg.len(), dereg.len()),
                (1, 1),
                "rank {rank} seq {seq}: {log:?}"
            );
            let rounds: Vec<usize> = (0..log.len())
                .filter(|&i| matches!(&log[i], Event::Progress(s) if s.contains(&seq)))
                .collect();
            assert!(!rounds.is_empty(), "rank {rank} seq {seq}: no round");
            assert!(reg[0] < rounds[0], "rank {rank} seq {seq}: {log:?}");
            assert!(
                dereg[0] > *rounds.last().unwrap(),
                "rank {rank} seq {seq}: {log:?}"
            );
        }
    }

    /// A link that needs registration (as RDMA verbs will) under two real ranks over TCP:
    /// the driver registers each broadcast's buffer before any data moves and deregisters
    /// it before handing it back, after completion and after a failure.
    #[test]
    fn a_link_that_registers_gets_buffers_before_data_and_back_after_completion_or_failure() {
        let mut tcps: Vec<TcpTransport> = (0..2)
            .map(|r| TcpTransport::bind(r, "127.0.0.1").unwrap())
            .collect();
        let addrs: Vec<_> = tcps.iter().map(TcpTransport::local_addr).collect();
        for t in &mut tcps {
            t.set_peers(addrs.clone(), 42);
        }
        let mut logs: Vec<Arc<Mutex<Vec<Event>>>> = Vec::new();
        let mut ops = Vec::new();
        let mut threads = Vec::new();
        for (rank, tcp) in tcps.into_iter().enumerate() {
            let (mut link, log) = Recording::new(Box::new(tcp));
            let wake = Arc::new(Wake::new().unwrap());
            link.set_wake(wake.raw());
            let (tx, rx) = crossbeam_channel::unbounded();
            logs.push(log);
            ops.push((tx, wake.clone()));
            threads.push(std::thread::spawn(move || {
                link.connect(&[1 - rank], Duration::from_secs(10)).unwrap();
                serve(
                    rank,
                    Box::new(link),
                    rx,
                    wake,
                    None,
                    Tuning {
                        poll: Duration::ZERO,
                        round: crate::comm::ROUND,
                        window: EngineConfig::default().window,
                    },
                );
            }));
        }
        let post = |rank: usize, jobs: Vec<Job>, buf: Vec<u8>| {
            let (reply, outcome) = crossbeam_channel::bounded(1);
            let buf = Buffer::Owned(buf);
            ops[rank].0.send(Op::Run { buf, jobs, reply }).unwrap();
            ops[rank].1.notify();
            outcome
        };
        let wait = |outcome: &Receiver<Outcome>| outcome.recv_timeout(Duration::from_secs(60));
        // Both ranks run `seqs` as one run on one buffer of `len` bytes, byte-exact; the
        // buffer is deregistered before it comes back.
        let run = |seqs: &[u64], len: usize| {
            let data = pattern(len, 0);
            let replies: Vec<_> = (0..2)
                .map(|r| {
                    let buf = if r == 0 { data.clone() } else { vec![0; len] };
                    let jobs = seqs.iter().map(|&s| job(s, len as u64)).collect();
                    post(r, jobs, buf)
                })
                .collect();
            for (r, reply) in replies.iter().enumerate() {
                let out = wait(reply).expect("no hang");
                assert!(out.result.is_ok(), "rank {r}: {:?}", out.result.err());
                assert_eq!(out.buf.as_deref(), Some(&data[..]), "rank {r}");
                let last = logs[r].lock().unwrap().last().cloned();
                assert_eq!(last, Some(Event::Deregister(*seqs.last().unwrap())));
            }
        };
        // One broadcast, then a run of two on the same buffer (re-registered per job).
        run(&[1], 100_003);
        run(&[2, 3], 10_000);
        // Rank 1 goes away while rank 0 broadcasts: rank 0 fails, and deregisters first.
        let reply = post(0, vec![job(4, 50_000)], pattern(50_000, 0));
        let (gone, _) = ops.pop().unwrap();
        drop(gone);
        threads.pop().unwrap().join().unwrap();
        let out = wait(&reply).expect("no hang");
        assert!(out.result.is_err(), "rank 0 broadcast alone");
        assert_eq!(logs[0].lock().unwrap().last(), Some(&Event::Deregister(4)));
        drop(ops);
        threads.pop().unwrap().join().unwrap();
        let sizes = [(1, 100_003), (2, 10_000), (3, 10_000)];
        check(&logs[1].lock().unwrap(), &sizes, 1);
        check(
            &logs[0].lock().unwrap(),
            &[sizes.as_slice(), &[(4, 50_000)]].concat(),
            0,
        );
    }
}
