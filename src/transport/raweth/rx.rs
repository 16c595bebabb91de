//! The receiving half of [`RawEthTransport`]: frames from `recvmmsg` batches or the mmap
//! ring, checked, filtered (addressing, peer, cookie, communicator, version, length), passed
//! through the per-peer reliability, then copied to their offset in the user buffer.

use super::{io_err, ring, Assembly, RawEthTransport};
use crate::engine::{Bcast, DataHeader, Message, Placement};
use crate::transport::raweth::reliable::Accept;
use crate::transport::raweth::socket::{Addressed, Mac, RecvBatch};
use crate::transport::TransportError;
use crate::wire::frame::{flags, Frame, Kind, Repr};
use crate::wire::WireError;
use std::io;

impl RawEthTransport {
    /// Receives what is there (bounded), checking every frame before use.
    pub(super) fn receive(
        &mut self,
        buf: &mut [u8],
        mut bcast: Option<&mut Bcast>,
        clock: &dyn Fn() -> u64,
    ) -> Result<(), crate::Error> {
        if let Some(mut ring) = self.ring.take() {
            let result = self.receive_ring(&mut ring, buf, bcast, clock);
            self.ring = Some(ring);
            return result;
        }
        let mut recv = std::mem::replace(&mut self.recv, RecvBatch::new(1, 1));
        let mut result = Ok(());
        for _ in 0..16 {
            match self.sock.recv_batch(&mut recv) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::Interrupted =>
                {
                    break
                }
                Err(e) => {
                    result = Err(io_err(None, e).into());
                    break;
                }
            }
            let now = clock();
            for (mac, to, truncated, bytes) in recv.frames() {
                if to == Addressed::OtherHost {
                    self.counters.dropped_otherhost += 1;
                    continue;
                }
                if let Err(e) =
                    self.handle_frame(buf, bcast.as_deref_mut(), now, mac, truncated, bytes)
                {
                    result = Err(e);
                    break;
                }
            }
            if result.is_err() {
                break;
            }
            if let Some(b) = bcast.as_deref_mut() {
                self.queue(b)?;
            }
            self.send(buf, clock())?;
        }
        self.recv = recv;
        result
    }

    fn receive_ring(
        &mut self,
        ring: &mut ring::RxRing,
        buf: &mut [u8],
        mut bcast: Option<&mut Bcast>,
        clock: &dyn Fn() -> u64,
    ) -> Result<(), crate::Error> {
        for _ in 0..16 {
            let now = clock();
            let mut result = Ok(());
            let taken = ring.drain(self.config.batch.max(1), |mac, to, cut, bytes| {
                if result.is_err() {
                    return;
                }
                if to == Addressed::OtherHost {
                    self.counters.dropped_otherhost += 1;
                    return;
                }
                result = self.handle_frame(buf, bcast.as_deref_mut(), now, mac, cut, bytes);
            });
            result?;
            if taken == 0 {
                break;
            }
            if let Some(b) = bcast.as_deref_mut() {
                self.queue(b)?;
            }
            self.send(buf, clock())?;
        }
        Ok(())
    }

    fn handle_frame(
        &mut self,
        buf: &mut [u8],
        bcast: Option<&mut Bcast>,
        now: u64,
        mac: Mac,
        truncated: bool,
        bytes: &[u8],
    ) -> Result<(), crate::Error> {
        self.counters.rx_frames += 1;
        self.counters.rx_bytes += bytes.len() as u64;
        let Some(&rank) = self.by_mac.get(&mac) else {
            self.counters.dropped_unknown_peer += 1;
            return Ok(());
        };
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
        let peer = self.peers.get_mut(&rank).expect("mapped MAC has a peer");
        let copy = (head.flags >> flags::COPY_SHIFT) as u8;
        let repaired = (head.kind() == Kind::Ack && head.flags & flags::REPAIRED != 0)
            .then_some((head.peer_seq, copy));
        peer.tx
            .on_ack(now, head.ack, head.sack, head.credit, repaired);
        if head.kind() == Kind::Ack {
            return Ok(());
        }
        match peer.rx.would_accept(head.peer_seq) {
            Accept::Duplicate => {
                peer.rx.accept(head.peer_seq);
                return Ok(());
            }
            Accept::OutOfWindow => {
                self.counters.out_of_window += 1;
                return Ok(());
            }
            Accept::Fresh => {}
        }
        if self.content(buf, bcast, now, rank, &head, frame.payload(), true)? {
            let rx = &mut self.peers.get_mut(&rank).expect("mapped MAC has a peer").rx;
            rx.accept(head.peer_seq);
            if head.flags & flags::RETRANSMIT != 0 {
                rx.repaired(head.peer_seq, copy);
            }
        }
        Ok(())
    }

    /// Acts on a frame's content. Returns false when it could not be taken (a later
    /// broadcast's frame with no room to keep it): then it is not acknowledged.
    #[allow(clippy::too_many_arguments)]
    fn content(
        &mut self,
        buf: &mut [u8],
        bcast: Option<&mut Bcast>,
        now: u64,
        rank: usize,
        head: &Repr,
        payload: &[u8],
        fresh: bool,
    ) -> Result<bool, crate::Error> {
        let later = |t: &mut RawEthTransport| {
            if !fresh {
                t.later.push((rank, *head, payload.to_vec()));
                return true;
            }
            if t.later.len() >= t.config.later_frames {
                t.counters.later_dropped += 1;
                return false;
            }
            t.counters.later_kept += 1;
            t.later.push((rank, *head, payload.to_vec()));
            true
        };
        let Some(bcast) = bcast else {
            // No broadcast running: keep anything that may belong to the next one.
            return Ok(match head.kind() {
                Kind::Data | Kind::Credit | Kind::Done if head.bcast_seq >= self.current => {
                    later(self)
                }
                _ => true,
            });
        };
        match head.kind() {
            Kind::Data => {
                let key = (rank, head.bcast_seq, head.lane, head.index);
                let known = self.assembly.contains_key(&key);
                if !known {
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
                    match bcast.place(rank, &h)? {
                        Placement::Into(range) if range.end <= buf.len() => {
                            self.assembly.insert(
                                key,
                                Assembly {
                                    start: range.start,
                                    len: range.len(),
                                    got: 0,
                                    head: h,
                                },
                            );
                        }
                        Placement::Into(range) => {
                            return Err(TransportError::BadFrame {
                                peer: rank,
                                reason: format!(
                                    "segment {} lands at {range:?}, beyond the {}-byte buffer",
                                    h.index,
                                    buf.len()
                                ),
                            }
                            .into())
                        }
                        Placement::Discard => return Ok(true),
                        Placement::Later => return Ok(later(self)),
                    }
                }
                let a = self.assembly.get_mut(&key).expect("inserted above");
                let off = head.offset as usize;
                if off + payload.len() > a.len {
                    self.counters.dropped_length += 1;
                    return Ok(true);
                }
                buf[a.start + off..a.start + off + payload.len()].copy_from_slice(payload);
                a.got += payload.len();
                if a.got >= a.len {
                    let a = self.assembly.remove(&key).expect("present");
                    bcast.handle_data(now, &a.head);
                }
                Ok(true)
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
                match bcast.handle_message(now, rank, &msg)? {
                    Placement::Later => Ok(later(self)),
                    _ => Ok(true),
                }
            }
            _ => Ok(true),
        }
    }

    /// Offers kept frames of later broadcasts to `bcast` (those still later stay kept).
    pub(super) fn deliver_later(
        &mut self,
        buf: &mut [u8],
        bcast: &mut Bcast,
        now: u64,
    ) -> Result<(), crate::Error> {
        let kept = std::mem::take(&mut self.later);
        for (rank, head, payload) in kept {
            if head.bcast_seq < bcast.setup().seq {
                continue;
            }
            self.content(buf, Some(bcast), now, rank, &head, &payload, false)?;
        }
        Ok(())
    }
}
