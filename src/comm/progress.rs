//! The progress thread: one loop joins the communicator's [`Endpoint`] (every broadcast in
//! flight), its link and the real clock. Broadcasts are posted in the order the caller posts
//! them (the same at every rank: MPI's rule), several may run at once, and the link is
//! served between broadcasts too (a lossy link's acknowledgements and heartbeats), so a rank
//! that computes while others broadcast is late, never gone.

use super::link::Link;
use super::CommError;
use crate::engine::{Bcast, Config as EngineConfig, Endpoint, Setup};
use crate::plan::Lane;
use crate::transport::wake::spin;
use crate::transport::{Buffer, Buffers, Wake};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One engine run: a broadcast (or a barrier phase).
pub struct Job {
    pub lanes: Arc<Vec<Lane>>,
    pub setup: Setup,
    pub engine: EngineConfig,
    pub connect_timeout: Duration,
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
    /// The transport's counters (monotonic; empty for TCP, which has none of its own).
    Counters {
        reply: Sender<BTreeMap<String, u64>>,
    },
}

/// A posted run: the jobs still to start, and whom to tell.
struct Run {
    jobs: VecDeque<Job>,
    reply: Sender<Outcome>,
    started: u64,
}

/// The longest a round waits for the link while broadcasts run (a newly posted broadcast
/// ends the wait at once through the [`Wake`]).
const ROUND: Duration = Duration::from_millis(50);
/// Between broadcasts, on a link that must keep answering peers.
const IDLE_ROUND: Duration = Duration::from_millis(50);

struct Driver {
    me: usize,
    link: Link,
    endpoint: Endpoint,
    bufs: Buffers,
    /// By the sequence number of the job running now.
    runs: BTreeMap<u64, Run>,
    start: Instant,
    /// After a failure every later broadcast fails too: peers saw this rank close its links,
    /// and a rank must never go on alone.
    failed: Option<String>,
}

/// Serves `ops` until the communicator drops its end.
pub fn serve(me: usize, link: Link, ops: Receiver<Op>, wake: Arc<Wake>, poll: Duration) {
    let mut d = Driver {
        me,
        link,
        endpoint: Endpoint::new(),
        bufs: Buffers::new(),
        runs: BTreeMap::new(),
        start: Instant::now(),
        failed: None,
    };
    loop {
        wake.clear();
        let busy = !d.runs.is_empty();
        let op = if busy || (d.failed.is_none() && d.link.serves_idle()) {
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
                reply.send(d.link.counters()).ok();
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

    /// Posts the first job of a run (the others start when it completes).
    fn post(&mut self, buf: Buffer, jobs: Vec<Job>, reply: Sender<Outcome>) {
        let mut run = Run {
            jobs: jobs.into(),
            reply,
            started: self.now(),
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

    /// Starts one job: its engine joins the endpoint, which delivers what arrived early.
    fn start_job(&mut self, job: Job) -> crate::Result<()> {
        let now = self.now();
        let seq = job.setup.seq;
        let bcast = Bcast::new(self.me, &job.lanes, job.setup, job.engine, now)?;
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
        let wait = if self.runs.keys().any(|&seq| self.endpoint.is_done(seq)) {
            Duration::ZERO
        } else if self.runs.is_empty() {
            IDLE_ROUND
        } else {
            ROUND
        };
        let start = self.start;
        let clock = move || start.elapsed().as_nanos() as u64;
        let result = self
            .endpoint
            .handle_timeout(clock())
            .map_err(crate::Error::from)
            .and_then(|()| {
                self.link
                    .progress(&mut self.bufs, &mut self.endpoint, &clock, wait)
            });
        if let Err(e) = result {
            self.fail(e);
            return;
        }
        let done: Vec<u64> = self
            .runs
            .keys()
            .copied()
            .filter(|&seq| self.endpoint.is_done(seq))
            .collect();
        for seq in done {
            self.endpoint.finish(seq);
            let mut run = self.runs.remove(&seq).expect("listed");
            let buf = self.bufs.remove(&seq).expect("a run has a buffer");
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
        for (seq, run) in std::mem::take(&mut self.runs) {
            self.endpoint.finish(seq);
            let result = match first.take() {
                Some(e) => Err(e),
                None => Err(CommError::Failed(why.clone()).into()),
            };
            let buf = self.bufs.remove(&seq).and_then(Buffer::into_owned);
            run.reply.send(Outcome { result, buf }).ok();
        }
    }

    fn fail_all(&mut self, why: &str) {
        for (seq, run) in std::mem::take(&mut self.runs) {
            let buf = self.bufs.remove(&seq).and_then(Buffer::into_owned);
            run.reply
                .send(Outcome {
                    result: Err(CommError::Failed(why.into()).into()),
                    buf,
                })
                .ok();
        }
    }
}
