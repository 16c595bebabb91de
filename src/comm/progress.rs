//! The progress thread: owns the link, runs the posted broadcasts in posting order (every rank
//! posts them in the same order, blocking and nonblocking alike) on a real clock, and keeps
//! answering peers between broadcasts (a lossy link's acknowledgements and heartbeats), so a
//! rank that computes while others broadcast is seen as late, never as gone.

use super::link::{Link, LINGER};
use super::CommError;
use crate::engine::{Bcast, Config as EngineConfig, Setup};
use crate::plan::Lane;
use crate::transport::{drive, BufLoan, RawBuf, Transport};
use crossbeam_channel::{Receiver, Sender, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One engine run: a broadcast (or a barrier phase).
pub struct Job {
    pub lanes: Arc<Vec<Lane>>,
    pub setup: Setup,
    pub engine: EngineConfig,
    pub connect_timeout: Duration,
}

/// The bytes a broadcast runs on.
pub enum Buffer {
    /// A blocking broadcast's buffer, lent for its duration.
    Loan(BufLoan),
    /// A nonblocking broadcast's own vector, handed back at completion.
    Owned(Vec<u8>),
    /// A nonblocking broadcast of the C API: the caller's bytes.
    Raw(RawBuf),
}

impl Buffer {
    pub fn len(&mut self) -> usize {
        self.as_mut_slice().len()
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            Buffer::Loan(l) => l.as_mut_slice(),
            Buffer::Owned(v) => v,
            Buffer::Raw(r) => r.as_mut_slice(),
        }
    }

    fn into_owned(self) -> Option<Vec<u8>> {
        match self {
            Buffer::Owned(v) => Some(v),
            _ => None,
        }
    }
}

/// How a run ended: its duration (ns) or error, and an owned buffer back.
pub struct Outcome {
    pub result: crate::Result<u64>,
    pub buf: Option<Vec<u8>>,
}

pub enum Op {
    /// Runs `jobs` one after the other on `buf` (a barrier is two jobs).
    Run {
        buf: Buffer,
        jobs: Vec<Job>,
        reply: Sender<Outcome>,
    },
    /// The transport's counters (monotonic; empty for TCP, which has none of its own).
    Counters {
        reply: Sender<std::collections::BTreeMap<String, u64>>,
    },
}

/// Serves `ops` until the communicator drops its end.
pub fn serve(me: usize, mut transport: Link, ops: Receiver<Op>) {
    let start = Instant::now();
    let clock = move || start.elapsed().as_nanos() as u64;
    // After a failure every later broadcast fails too: peers saw this rank close its links,
    // and a rank must never go on alone.
    let mut failed: Option<String> = None;
    loop {
        let op = if failed.is_none() && transport.lingers() {
            match ops.try_recv() {
                Ok(op) => op,
                Err(TryRecvError::Empty) => {
                    // Between broadcasts: acknowledge, keep frames of the next broadcast,
                    // answer heartbeats.
                    if let Err(e) = transport.idle(&clock, Duration::from_millis(2)) {
                        tracing::error!(rank = me, error = %e, "link failed between broadcasts");
                        failed = Some(e.to_string());
                        transport.shutdown();
                    }
                    continue;
                }
                Err(TryRecvError::Disconnected) => break,
            }
        } else {
            match ops.recv() {
                Ok(op) => op,
                Err(_) => break,
            }
        };
        match op {
            Op::Run {
                mut buf,
                jobs,
                reply,
            } => {
                let result = match &failed {
                    Some(why) => Err(CommError::Failed(why.clone()).into()),
                    None => {
                        let t0 = clock();
                        let mut result = Ok(());
                        for job in &jobs {
                            result =
                                run_job(me, transport.as_mut(), buf.as_mut_slice(), job, &clock);
                            if let Err(e) = &result {
                                tracing::error!(rank = me, seq = job.setup.seq, error = %e, "broadcast failed; closing this rank's links so that its peers fail too");
                                failed = Some(e.to_string());
                                transport.shutdown();
                                break;
                            }
                        }
                        result.map(|()| clock() - t0)
                    }
                };
                let owned = buf.into_owned();
                reply.send(Outcome { result, buf: owned }).ok();
            }
            Op::Counters { reply } => {
                reply.send(transport.counters()).ok();
            }
        }
    }
    transport.shutdown();
}

/// Runs one job: connects, resumes and drives its engine, reporting the state at a failure.
fn run_job(
    me: usize,
    transport: &mut dyn Transport,
    buf: &mut [u8],
    job: &Job,
    clock: &dyn Fn() -> u64,
) -> crate::Result<()> {
    let mut bcast = Bcast::new(me, &job.lanes, job.setup, job.engine, clock())?;
    transport.connect(&bcast.peers(), job.connect_timeout)?;
    transport.resume(&mut bcast, clock())?;
    let result = drive(transport, buf, &mut bcast, clock, LINGER);
    if result.is_err() {
        tracing::warn!(
            rank = me,
            "state at the failure: {}\n{}",
            bcast.describe(),
            transport.describe_state(clock())
        );
    }
    result
}
