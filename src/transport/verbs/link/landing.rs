//! The verbs link's receiving side: completions, control messages in, and segments that
//! landed (written into the user buffer, or into the ring and copied out), told to the
//! driver.

use super::*;

impl<V: Verbs> VerbsLink<V> {
    /// Handles one completion.
    pub(super) fn complete(
        &mut self,
        c: Completion,
        bufs: &mut Buffers,
        driver: &mut dyn Driver,
        now: u64,
    ) -> crate::Result<()> {
        if c.wr_id & KIND != WR_RECV {
            return Ok(self.send_done(&c)?);
        }
        let peer = self.peer_of(c.qp);
        let slot = (c.wr_id & 0xf_ffff) as usize;
        let Some(p) = self.peers.get_mut(&peer) else {
            return Ok(()); // of a queue pair since destroyed (an idle edge closed)
        };
        p.free_recvs.push(slot as u32);
        p.last_used = now;
        if c.status != WcStatus::Success {
            return Ok(self.check(peer, c.status)?);
        }
        match c.kind {
            WcKind::RecvWriteImm => {
                let imm = c
                    .imm
                    .ok_or_else(|| bad(peer, "a write without immediate"))?;
                self.landed(peer, imm, c.byte_len as usize, bufs, driver, now)
            }
            _ => {
                let at = slot * SLOT;
                let len = (c.byte_len as usize).min(SLOT);
                let msg = Control::parse(&p.recv.bytes[at..at + len])
                    .map_err(|e| bad(peer, &e.to_string()))?;
                self.control_in(peer, msg, driver, now)
            }
        }
    }

    pub(super) fn peer_of(&self, qp: QpId) -> usize {
        self.by_qp.get(&qp).copied().unwrap_or(usize::MAX)
    }

    /// A failed work request marks its peer gone (its queue pair is in the error state).
    pub(super) fn check(&mut self, peer: usize, status: WcStatus) -> Result<(), TransportError> {
        match status {
            WcStatus::Success => Ok(()),
            WcStatus::RemoteAccess | WcStatus::LocalError | WcStatus::Other(_) => {
                Err(io(peer, format!("an RDMA work request failed: {status:?}")))
            }
            s => {
                self.gone.entry(peer).or_insert(s);
                Ok(())
            }
        }
    }

    /// A control message arrived.
    pub(super) fn control_in(
        &mut self,
        peer: usize,
        msg: Control,
        driver: &mut dyn Driver,
        now: u64,
    ) -> crate::Result<()> {
        match msg {
            Control::Engine(m) => driver.landed(now, peer, &m)?,
            Control::Advert {
                seq,
                token,
                shape,
                target,
            } => {
                if let Some(b) = driver.broadcast(seq) {
                    same_shape(peer, seq, shape, b)?;
                }
                self.adverts.insert(
                    (peer, seq),
                    Advert {
                        target,
                        token,
                        shape,
                    },
                );
            }
            Control::Release { copied } => {
                if let Some(p) = self.peers.get_mut(&peer) {
                    p.ring_released = p.ring_released.max(copied);
                }
            }
            Control::Heartbeat => {}
        }
        Ok(())
    }

    /// A write with immediate from `peer` completed: its bytes are in this rank's buffer
    /// (or in its ring block for `peer`, to copy out).
    pub(super) fn landed(
        &mut self,
        peer: usize,
        imm: u32,
        len: usize,
        bufs: &mut Buffers,
        driver: &mut dyn Driver,
        now: u64,
    ) -> crate::Result<()> {
        let (token, segment) = control::split_imm(imm);
        let Some(&seq) = self.tokens.get(&token) else {
            return Err(bad(
                peer,
                &format!("a segment of an unknown broadcast (token {token})"),
            )
            .into());
        };
        let Some(b) = driver.broadcast(seq) else {
            return Err(bad(
                peer,
                &format!("a segment of broadcast {seq}, which is not running"),
            )
            .into());
        };
        let h = header(b, segment).ok_or_else(|| {
            bad(
                peer,
                &format!("segment number {segment} is not in broadcast {seq}"),
            )
        })?;
        let range = b
            .layout
            .range(usize::from(h.lane), h.index)
            .map(|r| r.start as usize..r.end as usize)
            .expect("header checked it");
        let ring = self
            .regs
            .get(&seq)
            .is_some_and(|r| r.mr.is_none() && r.len > 0);
        if ring {
            let cfg = self.cfg;
            bump(&mut self.counters, "verbs_ring_bytes", len as u64);
            let p = self.peers.get_mut(&peer).expect("known peer");
            let slot = (p.ring_arrived % u64::from(cfg.ring_slots)) as usize;
            p.ring_arrived += 1;
            let offset = match &p.assembling {
                Some(a) if a.seq == seq && a.segment == segment => a.offset,
                _ => 0,
            };
            if offset + len > range.len() || len > cfg.ring_slot as usize {
                return Err(bad(
                    peer,
                    &format!(
                        "a {len}-byte piece at {offset} of a {}-byte segment",
                        range.len()
                    ),
                )
                .into());
            }
            let at = slot * cfg.ring_slot as usize;
            let to = range.start + offset;
            crate::transport::slot(bufs, peer, seq, to..to + len)?
                .copy_from_slice(&p.ring.bytes[at..at + len]);
            if offset + len < range.len() {
                p.assembling = Some(Assembling {
                    seq,
                    segment,
                    offset: offset + len,
                });
                return Ok(());
            }
            p.assembling = None;
        }
        match driver.header(peer, &h)? {
            Landing::Into { range: r, .. } if r == range => driver.landed(now, peer, &Message::Data(h)),
            other => Err(bad(
                peer,
                &format!("segment {segment} of broadcast {seq} landed but the engine routes it {other:?}"),
            )
            .into()),
        }
    }

    /// Polls the completion queue dry (the backlog first).
    pub(super) fn poll_all(
        &mut self,
        bufs: &mut Buffers,
        driver: &mut dyn Driver,
        now: u64,
    ) -> crate::Result<usize> {
        let mut n = 0;
        let mut batch = Vec::new();
        loop {
            batch.clear();
            batch.extend(self.backlog.drain(..));
            if batch.is_empty() {
                self.poll_cq(&mut batch, 64)
                    .map_err(|e| io(self.rank, format!("polling the completion queue: {e}")))?;
            }
            if batch.is_empty() {
                return Ok(n);
            }
            n += batch.len();
            for c in std::mem::take(&mut batch) {
                self.complete(c, bufs, driver, now)?;
            }
        }
    }
}

/// The header of segment number `segment` (lanes one after another) of broadcast `b`.
pub(super) fn header(b: Broadcast<'_>, segment: u32) -> Option<DataHeader> {
    let (lane, index) = b.layout.locate(u64::from(segment))?;
    b.header(lane, index)
}
