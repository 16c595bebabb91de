//! A nonblocking broadcast in flight ([`Comm::ibcast`](super::Comm::ibcast)).

use super::names::Names;
use super::progress::Outcome;
use super::CommError;
use crate::transport::wake::spin;
use crossbeam_channel::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::Duration;

/// A posted broadcast. It completes on the progress thread; `test` and `wait` collect the
/// outcome. Dropping an unfinished request waits for it (the buffer is in use until then).
pub struct Request {
    answer: Receiver<Outcome>,
    outcome: Option<Outcome>,
    /// How long `wait` polls before it sleeps ([`Config::poll`](super::Config::poll)).
    poll: Duration,
    /// A view's: its errors name peers in its ranks.
    names: Option<Names>,
}

impl Request {
    pub(super) fn new(answer: Receiver<Outcome>, poll: Duration, names: Option<Names>) -> Request {
        Request {
            answer,
            outcome: None,
            poll,
            names,
        }
    }

    /// Whether the broadcast has completed (successfully or not). Never blocks.
    pub fn test(&mut self) -> bool {
        if self.outcome.is_none() {
            match self.answer.try_recv() {
                Ok(o) => self.outcome = Some(o),
                // The reply's sender lives in the progress thread until the run replies.
                Err(TryRecvError::Disconnected) => self.outcome = Some(gone()),
                Err(TryRecvError::Empty) => {}
            }
        }
        self.outcome.is_some()
    }

    /// Whether the broadcast has completed, waiting up to `limit` for it: a completion wakes
    /// the caller at once (no polling delay), and the caller may do other work (an MPI's
    /// progress) between such waits.
    pub fn test_within(&mut self, limit: Duration) -> bool {
        if self.outcome.is_none() {
            match self.answer.recv_timeout(limit) {
                Ok(o) => self.outcome = Some(o),
                Err(RecvTimeoutError::Disconnected) => self.outcome = Some(gone()),
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
        self.outcome.is_some()
    }

    /// Waits for completion; returns the broadcast's result and, for a broadcast of an owned
    /// vector ([`Comm::ibcast`](super::Comm::ibcast)), the vector.
    pub fn wait(mut self) -> (crate::Result<()>, Option<Vec<u8>>) {
        let o = self.take();
        (o.result.map(|_| ()), o.buf)
    }

    fn take(&mut self) -> Outcome {
        let o = match self.outcome.take() {
            Some(o) => o,
            None => spin(self.poll, || self.answer.try_recv().ok())
                .map_or_else(|| self.answer.recv(), Ok)
                .unwrap_or_else(|_| gone()),
        };
        match &self.names {
            Some(names) => Outcome {
                result: o.result.map_err(|e| names.of(e)),
                buf: o.buf,
            },
            None => o,
        }
    }
}

fn gone() -> Outcome {
    Outcome {
        result: Err(CommError::ProgressGone.into()),
        buf: None,
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        if self.outcome.is_none() {
            let _ = self.answer.recv();
        }
    }
}
