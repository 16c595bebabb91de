//! The verbs link's sending side: control messages and RDMA writes to each peer, from the
//! user buffer or through a staging slot, and their completions.

use super::*;

impl<V: Verbs> VerbsLink<V> {
    /// Sends what is queued to `peer` while its send queue has room: control first, then
    /// segments in order.
    pub(super) fn flush(
        &mut self,
        peer: usize,
        bufs: &mut Buffers,
        now: u64,
    ) -> Result<(), TransportError> {
        loop {
            let p = self.peers.get_mut(&peer).expect("known peer");
            if p.sq_used >= self.cfg.send_depth {
                return Ok(());
            }
            let Some(c) = p.control_out.pop_front() else {
                break;
            };
            let mut b = [0u8; control::LEN];
            let n = c.emit(&mut b);
            let wr = SendWr {
                wr_id: WR_CONTROL | peer as u64,
                op: Op::Send,
                local: Local::Inline(&b[..n]),
            };
            // SAFETY: an inline send copies its bytes when posted; no memory is referenced.
            unsafe { self.verbs.post_send(p.qp, &wr) }
                .map_err(|e| io(peer, format!("posting a send: {e}")))?;
            p.sq_used += 1;
            p.last_sent = now;
            p.last_used = now;
            if c == Control::Heartbeat {
                p.heartbeat_out = true;
            }
        }
        while self.write_next(peer, bufs, now)? {}
        Ok(())
    }

    /// Posts the next piece of the first segment queued to `peer`; whether it did.
    pub(super) fn write_next(
        &mut self,
        peer: usize,
        bufs: &mut Buffers,
        now: u64,
    ) -> Result<bool, TransportError> {
        let cfg = self.cfg;
        let p = self.peers.get_mut(&peer).expect("known peer");
        if p.sq_used >= cfg.send_depth {
            return Ok(false);
        }
        let Some(out) = p.data_out.front_mut() else {
            return Ok(false);
        };
        let Some(advert) = self.adverts.get(&(peer, out.seq)).copied() else {
            return Ok(false); // the child has not posted this broadcast yet
        };
        let Some(reg) = self.regs.get(&out.seq) else {
            return Err(io(
                peer,
                format!(
                    "broadcast {} has a segment to send but no registered buffer",
                    out.seq
                ),
            ));
        };
        let reg_id = reg.id;
        let remaining = out.payload.len() - out.sent;
        let mut piece = remaining.min(self.verbs.max_msg() as usize);
        let ring = advert.target == Target::Ring;
        if ring || (reg.mr.is_none() && reg.len > 0) {
            piece = piece.min(cfg.ring_slot as usize);
        }
        let last = piece == remaining;
        let imm = (ring || last).then(|| control::imm(advert.token, out.segment));
        let (remote_addr, rkey) = match advert.target {
            Target::Ring => {
                if p.ring_sent - p.ring_released >= u64::from(cfg.ring_slots) {
                    return Ok(false); // its ring is full: wait for a release
                }
                let slot = p.ring_sent % u64::from(cfg.ring_slots);
                (p.ring_addr + slot * u64::from(cfg.ring_slot), p.ring_rkey)
            }
            Target::Buffer { addr, rkey, len } => {
                if out.payload.end as u64 > len {
                    return Err(io(
                        peer,
                        format!(
                            "broadcast {}: its buffer is {len} bytes, segment {} ends at byte {}",
                            out.seq, out.segment, out.payload.end
                        ),
                    ));
                }
                (addr + (out.payload.start + out.sent) as u64, rkey)
            }
        };
        let from = out.payload.start + out.sent;
        let (local, stage) = match reg.mr {
            _ if piece == 0 => (Local::Empty, NO_STAGE),
            Some(mr) => (
                Local::Sge {
                    addr: reg.addr + from as u64,
                    len: piece as u32,
                    lkey: mr.lkey,
                },
                NO_STAGE,
            ),
            None => {
                let Some(slot) = self.free_stage.pop() else {
                    return Ok(false); // every staging slot is in flight
                };
                let at = slot as usize * cfg.ring_slot as usize;
                let src = bufs
                    .get(&out.seq)
                    .map(Buffer::as_slice)
                    .and_then(|b| b.get(from..from + piece))
                    .ok_or_else(|| crate::transport::gone_buffer(peer, out.seq))?;
                self.stage.bytes[at..at + piece].copy_from_slice(src);
                bump(&mut self.counters, "verbs_staged_bytes", piece as u64);
                (
                    Local::Sge {
                        addr: self.stage.addr(at),
                        len: piece as u32,
                        lkey: self.stage.mr.lkey,
                    },
                    u64::from(slot),
                )
            }
        };
        let wr = SendWr {
            wr_id: WR_WRITE | stage << 40 | reg.id,
            op: Op::Write {
                remote_addr,
                rkey,
                imm,
            },
            local,
        };
        // SAFETY: the source is the broadcast's buffer inside its registration (held until
        // `deregister`, which first waits for this write's completion) or a staging slot
        // that stays reserved until the completion.
        unsafe { self.verbs.post_send(p.qp, &wr) }
            .map_err(|e| io(peer, format!("posting an RDMA write: {e}")))?;
        p.sq_used += 1;
        p.last_sent = now;
        p.last_used = now;
        if ring {
            p.ring_sent += 1;
        }
        out.sent += piece;
        *self.writing.entry(reg_id).or_default() += 1;
        if out.sent == out.payload.len() {
            p.data_out.pop_front();
        }
        bump(&mut self.counters, "verbs_writes", 1);
        Ok(true)
    }

    /// A send work request (control message or write) completed: frees its queue slot
    /// and staging slot, counts its write done. Needs no driver, so that `deregister` can
    /// wait for writes.
    pub(super) fn send_done(&mut self, c: &Completion) -> Result<(), TransportError> {
        let peer = self.peer_of(c.qp);
        if let Some(p) = self.peers.get_mut(&peer) {
            p.sq_used = p.sq_used.saturating_sub(1);
            if c.wr_id & KIND == WR_CONTROL {
                p.heartbeat_out = false;
            }
        }
        if c.wr_id & KIND == WR_WRITE {
            let stage = (c.wr_id >> 40) & NO_STAGE;
            if stage != NO_STAGE {
                self.free_stage.push(stage as u32);
            }
            let key = c.wr_id & REG_MASK;
            if let Some(n) = self.writing.get_mut(&key) {
                *n -= 1;
                if *n == 0 {
                    self.writing.remove(&key);
                }
            }
            if c.status == WcStatus::RemoteAccess {
                return Err(io(
                    peer,
                    "it refused an RDMA write into its buffer (remote access error: a wrong key or range)".into(),
                ));
            }
        }
        self.check(peer, c.status)
    }
}
