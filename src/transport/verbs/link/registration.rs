//! The verbs link's registrations: a broadcast's buffer registered when it is posted (or
//! the ring fallback when it cannot be), announced to its parents, and deregistered once the
//! device no longer reads it.

use super::*;

impl<V: Verbs> VerbsLink<V> {
    pub(super) fn register_buffer(&mut self, seq: u64, buf: &Buffer) -> Result<(), TransportError> {
        // The lowest token no broadcast in flight here holds (its parents learn it from the
        // advert).
        let Some(token) = (0..=u8::MAX).find(|t| !self.tokens.contains_key(t)) else {
            return Err(setup(format!(
                "broadcast {seq} finds no free immediate token: at most 256 broadcasts may be in flight on a verbs link"
            )));
        };
        let bytes = buf.as_slice();
        let (addr, len) = (bytes.as_ptr() as u64, bytes.len());
        let mr = if len == 0 {
            None
        } else {
            // SAFETY: the buffer stays in the driver's `Buffers` (allocated, not moved) until
            // after `deregister(seq)`, which releases this registration.
            match unsafe {
                self.cache
                    .acquire(&mut self.verbs, bytes.as_ptr().cast_mut(), len)
            } {
                Ok(mr) => Some(mr),
                Err(e) => {
                    tracing::debug!(seq, error = %e, "verbs: buffer not registered, using the rings");
                    bump(&mut self.counters, "verbs_unregistered_buffers", 1);
                    None
                }
            }
        };
        self.tokens.insert(token, seq);
        let id = self.next_reg;
        self.next_reg = (self.next_reg + 1) & REG_MASK;
        self.regs.insert(
            seq,
            Reg {
                id,
                token,
                mr,
                addr,
                len,
                advertised: BTreeSet::new(),
            },
        );
        Ok(())
    }

    pub(super) fn deregister_buffer(&mut self, seq: u64) {
        // The device may still read this buffer for writes whose completion was not polled
        // (their data arrived: the children credited it): wait for them first.
        // A failed queue pair flushes its work with completions, so this ends; the deadline
        // only guards against a device that stops answering. Between empty polls it sleeps on
        // the completion channel (armed, then polled once more so that no completion slips
        // in between), not in a busy loop.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut batch = Vec::new();
        let id = self.regs.get(&seq).map(|r| r.id);
        while id.is_some_and(|id| self.writing.contains_key(&id)) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            batch.clear();
            if self.poll_cq(&mut batch, 64).is_err() {
                break;
            }
            if batch.is_empty() {
                match self.verbs.wait_fd() {
                    Some(fd) if self.verbs.arm().is_ok() => {
                        if self.poll_cq(&mut batch, 64).is_err() {
                            break;
                        }
                        if batch.is_empty() {
                            wait_for(&[(fd, libc::POLLIN)], left).ok();
                        }
                    }
                    _ => std::thread::sleep(Duration::from_micros(50)),
                }
            }
            for c in batch.drain(..) {
                if c.wr_id & KIND == WR_RECV {
                    self.backlog.push_back(c); // for the next round, which has the driver
                } else if let Err(e) = self.send_done(&c) {
                    tracing::debug!(seq, error = %e, "verbs: a send failed while a broadcast ended");
                }
            }
        }
        if let Some(reg) = self.regs.remove(&seq) {
            self.tokens.remove(&reg.token);
            if let Some(mr) = reg.mr {
                self.cache.release(&mut self.verbs, mr.id);
            }
        }
        self.adverts.retain(|&(_, s), _| s != seq);
        for p in self.peers.values_mut() {
            p.data_out.retain(|o| o.seq != seq);
            if p.assembling.as_ref().is_some_and(|a| a.seq == seq) {
                p.assembling = None;
            }
        }
    }
}
