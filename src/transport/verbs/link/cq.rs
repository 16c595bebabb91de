//! The verbs link's completion queue: polling it, sizing it to the queue pairs it serves
//! (growing before a post could overflow it, shrinking when edges close), and sleeping on
//! its completion channel.

use super::*;

impl<V: Verbs> VerbsLink<V> {
    /// Takes up to `max` completions into `out`. A poll that finds fewer emptied the queue,
    /// so no completion of a queue pair destroyed before it is left there: their room is
    /// free again.
    pub(super) fn poll_cq(
        &mut self,
        out: &mut Vec<Completion>,
        max: usize,
    ) -> Result<usize, VerbsError> {
        let n = self.verbs.poll(out, max)?;
        if n < max {
            self.retiring = 0;
        }
        Ok(n)
    }

    /// Makes room in the completion queue for one more queue pair (to `peer`): what the
    /// queue holds is moved to the backlog when queue pairs destroyed since it was last
    /// empty are in the way, and it grows when more queue pairs than it was sized for are
    /// in use at once (more busy edges than `max_qps`). The queue then has room for every
    /// completion the link may have outstanding (`LinkConfig::cq_entries`): it never
    /// overruns.
    pub(super) fn cq_room(&mut self, peer: usize) -> Result<(), TransportError> {
        let need = |l: &Self| l.peers.len() + l.retiring + 1;
        if need(self) > self.cq_qps && self.retiring > 0 {
            self.cq_to_backlog()?;
        }
        if need(self) <= self.cq_qps {
            return Ok(());
        }
        let per = self.cfg.completions_per_qp();
        let qps = need(self) + need(self) / 4;
        self.verbs.resize_cq(qps * per).map_err(|e| {
            io(
                peer,
                format!(
                    "a queue pair for rank {peer}: the completion queue cannot grow for {qps} queue pairs ({e}); set PIPECAST_VERBS_MAX_QPS to the most tree edges a rank uses at once"
                ),
            )
        })?;
        self.cq_qps = self.verbs.cq_entries() / per;
        bump(&mut self.counters, "verbs_cq_resizes", 1);
        Ok(())
    }

    /// Moves what the completion queue holds to the backlog: afterwards no completion of a
    /// queue pair destroyed before is left in it (`retiring` is 0).
    pub(super) fn cq_to_backlog(&mut self) -> Result<(), TransportError> {
        let mut batch = Vec::new();
        loop {
            let n = self
                .poll_cq(&mut batch, 64)
                .map_err(|e| io(self.rank, format!("polling the completion queue: {e}")))?;
            self.backlog.extend(batch.drain(..));
            if n < 64 {
                break;
            }
        }
        Ok(())
    }

    /// Shrinks a grown completion queue once the queue pairs in use need at most a quarter
    /// of it (the hysteresis: a queue grows by a quarter over its need, so it does not go
    /// back and forth), to that need plus a quarter and never below its size at creation.
    /// What the queue holds goes to the backlog first, so it is empty of pending
    /// completions when resized (a device refuses to shrink below what it holds) and
    /// destroyed queue pairs take no room any more; the new size still has room for every
    /// completion the live queue pairs may have outstanding. A device that cannot shrink
    /// it keeps it as it is (no harm: it only holds memory), and is not asked again.
    pub(super) fn cq_shrink(&mut self) -> Result<(), TransportError> {
        if self.cq_qps <= self.cq_base || (self.peers.len() + self.retiring) * 4 > self.cq_qps {
            return Ok(());
        }
        self.cq_to_backlog()?;
        let need = self.peers.len();
        if need * 4 > self.cq_qps {
            return Ok(());
        }
        let per = self.cfg.completions_per_qp();
        let qps = (need + need / 4).max(self.cq_base);
        match self.verbs.resize_cq(qps * per) {
            Ok(()) => {
                self.cq_qps = self.verbs.cq_entries() / per;
                bump(&mut self.counters, "verbs_cq_shrinks", 1);
            }
            Err(e) => {
                tracing::debug!(error = %e, "verbs: the completion queue cannot shrink");
                self.cq_base = self.cq_qps;
            }
        }
        Ok(())
    }

    /// Asks the completion channel for the next completion's event, and puts the wait set
    /// in step with the side channel; completions that came before the arming go to the
    /// backlog and raise the wait set's flag. Afterwards the wait set is readable as soon as
    /// the link has anything to do, which is what a wait (its own, or another link's under
    /// a router: [`Link::wait_fd`]) needs.
    pub(super) fn arm(&mut self) -> Result<(), TransportError> {
        let rank = self.rank;
        self.waitset
            .sync(&self.side_fds())
            .map_err(|e| io(rank, format!("watching the queue pair handshakes: {e}")))?;
        if self.verbs.wait_fd().is_none() {
            return Ok(()); // no channel: a poll is all there is
        }
        self.verbs
            .arm()
            .map_err(|e| io(rank, format!("arming the completion channel: {e}")))?;
        let mut peek = Vec::new();
        self.poll_cq(&mut peek, 64)
            .map_err(|e| io(rank, format!("polling the completion queue: {e}")))?;
        if !peek.is_empty() || !self.backlog.is_empty() {
            self.backlog.extend(peek);
            self.waitset.raise();
        }
        Ok(())
    }

    /// Waits up to `wait` for the wait set (a completion, the side channel, the backlog) or
    /// the wake descriptor.
    pub(super) fn wait(&mut self, wait: Duration) -> Result<(), TransportError> {
        if self.verbs.wait_fd().is_none() {
            return Ok(()); // no channel: a completion would not end the wait
        }
        let fds: Vec<(std::os::fd::RawFd, i16)> = [Some(self.waitset.fd()), self.wake]
            .into_iter()
            .flatten()
            .map(|fd| (fd, libc::POLLIN))
            .collect();
        wait_for(&fds, wait).map_err(|e| io(self.rank, format!("waiting for completions: {e}")))
    }
}

/// Waits until one of `fds` has its events (`POLLIN`, `POLLOUT`), or `wait` passed.
pub(super) fn wait_for(fds: &[(std::os::fd::RawFd, i16)], wait: Duration) -> std::io::Result<()> {
    let mut polls: Vec<libc::pollfd> = fds
        .iter()
        .map(|&(fd, events)| libc::pollfd {
            fd,
            events,
            revents: 0,
        })
        .collect();
    crate::transport::poll::poll(&mut polls, wait)?;
    Ok(())
}
