//! The receiving half of [`RawEthTransport`]: frames from its ports (`recvmmsg` batches,
//! the mmap ring, or an in-memory medium), checked, filtered (addressing, peer, version, length, checksum, cookie,
//! communicator), passed through the per-peer reliability, then copied to their offset in the
//! user buffer. From the bytes on, it is [`FrameLink::receive_frame`]: no socket.

use super::{io_err, Assembly, FrameLink, RawEthTransport};
use crate::engine::reliable::Accept;
use crate::engine::{DataHeader, Message};
use crate::transport::arrival::Dest;
use crate::transport::driver::Driver;
use crate::transport::raweth::socket::{Addressed, Mac};
use crate::transport::{slot, Buffers};
use crate::wire::frame::{flags, Frame, Kind, Repr};
use crate::wire::WireError;

impl RawEthTransport {
    /// Receives what is there on rail `rail`'s port (bounded: up to 16 batches, sending
    /// between them), checking every frame before use.
    pub(super) fn receive(
        &mut self,
        rail: usize,
        bufs: &mut Buffers,
        driver: &mut dyn Driver,
        clock: &dyn Fn() -> u64,
    ) -> Result<(), crate::Error> {
        for _ in 0..16 {
            let now = clock();
            let mut result = Ok(());
            let link = &mut self.link;
            let batch = link.config.batch;
            let taken = self.ports[rail]
                .receive(batch, &mut |(mac, to, cut, bytes)| {
                    if result.is_err() {
                        return;
                    }
                    if to == Addressed::OtherHost {
                        link.counters.dropped_otherhost += 1;
                        return;
                    }
                    result = link.receive_frame_on(rail, bufs, &mut *driver, now, mac, cut, bytes);
                })
                .map_err(|e| io_err(None, e))?;
            result?;
            if taken == 0 {
                break;
            }
            self.link.queue(driver)?;
            self.send(bufs, clock())?;
        }
        Ok(())
    }
}

impl FrameLink {
    /// Takes one received frame: `bytes` after the Ethernet header, from MAC `mac`,
    /// `truncated` when the kernel cut it short. The sender's MAC must be a peer's; then
    /// lengths, version and checksum are checked before any other field is read, then that
    /// the rank the frame names as its sender has that MAC (ranks of one host share it) and
    /// that the frame is for this rank, then the cookie and communicator. Passes the frame through the per-peer
    /// reliability and lands its content (a data frame's payload at its offset in its
    /// broadcast's buffer in `bufs`, a control message to `driver`). A frame that fails a
    /// check is dropped and counted; an error means a peer that passed every check sent
    /// something impossible (a segment beyond its buffer).
    pub fn receive_frame(
        &mut self,
        bufs: &mut Buffers,
        driver: &mut dyn Driver,
        now: u64,
        mac: Mac,
        truncated: bool,
        bytes: &[u8],
    ) -> Result<(), crate::Error> {
        self.receive_frame_on(0, bufs, driver, now, mac, truncated, bytes)
    }

    /// [`FrameLink::receive_frame`] for a frame that arrived on rail `rail`'s NIC: its
    /// sender must be a peer's NIC on that rail (a frame from another rail's MAC, or on a
    /// rail the link does not run, is dropped as from an unknown peer), it is checked against
    /// this rank's MAC on that rail, and it goes through that rail's reliability.
    #[allow(clippy::too_many_arguments)] // receive_frame's, and the rail
    pub fn receive_frame_on(
        &mut self,
        rail: usize,
        bufs: &mut Buffers,
        driver: &mut dyn Driver,
        now: u64,
        mac: Mac,
        truncated: bool,
        bytes: &[u8],
    ) -> Result<(), crate::Error> {
        self.counters.rx_frames += 1;
        self.counters.rx_bytes += bytes.len() as u64;
        if !self
            .addrs
            .by_mac
            .get(rail)
            .is_some_and(|m| m.contains(&mac))
        {
            self.counters.dropped_unknown_peer += 1;
            return Ok(());
        }
        let frame = match Frame::new_checked(bytes) {
            Ok(f) if !truncated => f,
            Ok(_) | Err(WireError::Truncated { .. }) | Err(WireError::BadLength { .. }) => {
                self.counters.dropped_length += 1;
                return Ok(());
            }
            Err(WireError::BadVersion { .. }) => {
                self.counters.dropped_version += 1;
                return Ok(());
            }
            // new_checked only reports the three above; count anything else as a bad length.
            Err(_) => {
                self.counters.dropped_length += 1;
                return Ok(());
            }
        };
        if self.config.checksum && !frame.checksum_ok(&self.own[rail], &mac) {
            self.counters.dropped_checksum += 1;
            return Ok(());
        }
        // Ranks of a host share its MAC: the sender is the rank the frame names, and only
        // when that rank's MAC on this rail is the one the frame came from.
        let rank = frame.from() as usize;
        if self.addrs.macs[rail].get(&rank) != Some(&mac) {
            self.counters.dropped_unknown_peer += 1;
            return Ok(());
        }
        if frame.to() as usize != self.me {
            self.counters.dropped_otherrank += 1;
            return Ok(());
        }
        if frame.cookie() != self.cookie {
            self.counters.dropped_cookie += 1;
            return Ok(());
        }
        if frame.comm() != self.config.comm {
            self.counters.dropped_comm += 1;
            return Ok(());
        }
        let head = Repr::parse(&frame)?;
        if let Kind::Unknown(_) = head.kind() {
            self.counters.dropped_kind += 1;
            return Ok(());
        }
        let copy = (head.flags >> flags::COPY_SHIFT) as u8;
        let repaired = (head.kind() == Kind::Ack && head.flags & flags::REPAIRED != 0)
            .then_some((head.peer_seq, copy));
        let retransmit = (head.flags & flags::RETRANSMIT != 0).then_some(copy);
        let seq = (head.kind() != Kind::Ack).then_some((head.peer_seq, retransmit));
        let acked = (head.ack, head.sack, head.credit);
        match self.reliable[rail].receive(now, rank, acked, repaired, seq) {
            Some(Accept::Fresh) => self.content(bufs, driver, now, rank, &head, frame.payload()),
            None | Some(Accept::Duplicate) => Ok(()),
            Some(Accept::OutOfWindow) => {
                self.counters.out_of_window += 1;
                Ok(())
            }
        }
    }

    /// Acts on a frame's content: a data frame goes to its offset in its broadcast's buffer
    /// (or into a segment held for a broadcast not posted yet), a credit or done to the
    /// driver. Segments are assembled by distinct, non-overlapping frames: a duplicated or
    /// overlapping frame never completes a segment early.
    fn content(
        &mut self,
        bufs: &mut Buffers,
        driver: &mut dyn Driver,
        now: u64,
        rank: usize,
        head: &Repr,
        payload: &[u8],
    ) -> Result<(), crate::Error> {
        match head.kind() {
            Kind::Data => {
                let key = (rank, head.bcast_seq, head.lane, head.index);
                let h = DataHeader {
                    seq: head.bcast_seq,
                    root: head.root,
                    msize: head.msize,
                    segment: head.segment,
                    lanes: head.lanes,
                    lane: head.lane,
                    index: head.index,
                    len: head.segment_len,
                };
                if !self.assembly.contains_key(&key) {
                    // At most a segment to hold: the driver checked it.
                    let target = Dest::of(driver, rank, &h, h.len as usize)?;
                    match &target {
                        Dest::Buffer { seq, range } => {
                            slot(bufs, rank, *seq, range.clone())?;
                        }
                        Dest::Hold(_) => self.counters.later_kept += 1,
                        Dest::Discard => return Ok(()),
                    }
                    self.assembly
                        .insert(key, Assembly::new(target, h.len as usize, h));
                }
                let a = self.assembly.get_mut(&key).expect("inserted above");
                let (off, n) = (head.offset as usize, payload.len());
                if off + n > a.len || !a.fits(off, n) {
                    self.counters.dropped_length += 1;
                    return Ok(());
                }
                match &mut a.target {
                    Dest::Buffer { seq, range } => {
                        let at = range.start + off;
                        slot(bufs, rank, *seq, at..at + n)?.copy_from_slice(payload);
                    }
                    Dest::Hold(v) => v[off..off + n].copy_from_slice(payload),
                    Dest::Discard => {}
                }
                if a.add(off, n) {
                    let a = self.assembly.remove(&key).expect("present");
                    a.target
                        .landed(driver, bufs, now, rank, Message::Data(a.head))?;
                }
                Ok(())
            }
            Kind::Credit | Kind::Done => {
                let msg = if head.kind() == Kind::Credit {
                    Message::Credit {
                        seq: head.bcast_seq,
                        lane: head.lane,
                        consumed: head.offset,
                    }
                } else {
                    Message::Done {
                        seq: head.bcast_seq,
                        lane: head.lane,
                    }
                };
                driver.landed(now, rank, &msg)?;
                Ok(())
            }
            _ => Ok(()),
        }
    }
}
