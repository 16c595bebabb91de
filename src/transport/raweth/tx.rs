//! The sending half of [`RawEthTransport`]: engine transmits cut into frames, sent in
//! `sendmmsg` batches within each peer's credit and the pacer, retransmissions first.

use super::{io_err, Item, RawEthTransport};
use crate::engine::{Endpoint, Message};
use crate::transport::raweth::socket::Mac;
use crate::transport::Buffers;
use crate::transport::TransportError;
use crate::wire::frame::{flags, Kind, Repr};
use std::io::{self, IoSlice};

impl RawEthTransport {
    /// Turns the endpoint's transmits into frames on each peer's queue.
    pub(super) fn queue(&mut self, endpoint: &mut Endpoint) -> Result<(), TransportError> {
        // The engine ignores the time here.
        while let Some((_, t)) = endpoint.poll_transmit(0) {
            let peer = self
                .peers
                .get_mut(&t.to)
                .ok_or(TransportError::UnknownPeer { peer: t.to })?;
            let mut head = Repr {
                cookie: self.cookie,
                comm: self.config.comm,
                ..Repr::default()
            };
            match t.message {
                Message::Data(h) => {
                    head.kind = Kind::Data.into();
                    head.bcast_seq = h.seq;
                    head.root = h.root;
                    head.msize = h.msize;
                    head.segment = h.segment;
                    head.lanes = h.lanes;
                    head.lane = h.lane;
                    head.index = h.index;
                    head.segment_len = h.len;
                    let mut off = 0usize;
                    loop {
                        let len = (t.payload.len() - off).min(self.max_payload);
                        let start = t.payload.start + off;
                        peer.queue.push_back(Item {
                            head: Repr {
                                offset: off as u32,
                                payload_len: len as u16,
                                ..head
                            },
                            payload: start..start + len,
                        });
                        off += len;
                        if off >= t.payload.len() {
                            break;
                        }
                    }
                }
                Message::Credit {
                    seq,
                    lane,
                    consumed,
                } => {
                    head.kind = Kind::Credit.into();
                    head.bcast_seq = seq;
                    head.lane = lane;
                    head.offset = consumed;
                    peer.queue.push_back(Item {
                        head,
                        payload: 0..0,
                    });
                }
                Message::Done { seq, lane } => {
                    head.kind = Kind::Done.into();
                    head.bcast_seq = seq;
                    head.lane = lane;
                    peer.queue.push_back(Item {
                        head,
                        payload: 0..0,
                    });
                }
            }
        }
        Ok(())
    }

    /// Sends retransmissions, then new frames (round robin over peers, within credit and
    /// pacing), then bare acks for peers that are owed one.
    pub(super) fn send(&mut self, bufs: &Buffers, now: u64) -> Result<(), TransportError> {
        for p in self.peers.values_mut() {
            p.tx.handle_timeout(now);
        }
        let frame_len = self.frame_len();
        loop {
            // (peer, seq, item, new?)
            let mut batch: Vec<(usize, u64, Item, bool)> = Vec::with_capacity(self.config.batch);
            let mut progress = true;
            while batch.len() < self.config.batch && progress {
                progress = false;
                for (&rank, p) in self.peers.iter_mut() {
                    if batch.len() >= self.config.batch {
                        break;
                    }
                    let wants = p.tx.has_retransmit() || (!p.queue.is_empty() && p.tx.can_send());
                    if !wants || !self.pacer.try_take(now, frame_len) {
                        continue;
                    }
                    if let Some((seq, item)) = p.tx.poll_retransmit(now) {
                        batch.push((rank, seq, item.clone(), false));
                    } else if let Some(item) = p.queue.pop_front() {
                        let seq = p.tx.push(now, item.clone());
                        batch.push((rank, seq, item, true));
                    }
                    progress = true;
                }
            }
            if batch.is_empty() {
                break;
            }
            let sent = self.transmit(bufs, &batch)?;
            for (rank, seq, _, _) in &batch[..sent] {
                self.peers
                    .get_mut(rank)
                    .expect("batched peer")
                    .tx
                    .sent(*seq, now);
            }
            for (rank, seq, _, _) in batch[sent..].iter().rev() {
                self.peers
                    .get_mut(rank)
                    .expect("batched peer")
                    .tx
                    .unsent(*seq);
            }
            if sent < batch.len() {
                self.counters.send_blocked += 1;
                self.blocked = true;
                break;
            }
        }
        // Bare acks.
        let owed: Vec<usize> = self
            .peers
            .iter()
            .filter(|(_, p)| p.rx.ack_due())
            .map(|(&r, _)| r)
            .collect();
        for chunk in owed.chunks(self.config.batch.max(1)) {
            let batch: Vec<(usize, u64, Item, bool)> = chunk
                .iter()
                .map(|&r| {
                    let head = Repr {
                        kind: Kind::Ack.into(),
                        cookie: self.cookie,
                        comm: self.config.comm,
                        ..Repr::default()
                    };
                    (
                        r,
                        0,
                        Item {
                            head,
                            payload: 0..0,
                        },
                        false,
                    )
                })
                .collect();
            let sent = self.transmit(bufs, &batch)?;
            self.counters.acks_sent += sent as u64;
            if sent < batch.len() {
                self.blocked = true;
                break;
            }
        }
        Ok(())
    }

    /// Writes headers (with each peer's current ack) and sends a batch; returns how many
    /// frames the socket took.
    fn transmit(
        &mut self,
        bufs: &Buffers,
        batch: &[(usize, u64, Item, bool)],
    ) -> Result<usize, TransportError> {
        // A data frame's payload comes from its broadcast's buffer; once the broadcast is over
        // here (its buffer gone), a retransmission of it is a no-op that only fills its number.
        let body = |item: &Item| -> Option<&[u8]> {
            if item.payload.is_empty() {
                return Some(&[]);
            }
            bufs.get(&item.head.bcast_seq)
                .and_then(|b| b.as_slice().get(item.payload.clone()))
        };
        let mut heads = Vec::with_capacity(batch.len());
        for (rank, seq, item, new) in batch {
            let p = self.peers.get_mut(rank).expect("batched peer");
            let (ack, sack, credit) = p.rx.ack();
            p.rx.acked();
            let mut head = Repr {
                peer_seq: *seq,
                ack,
                sack,
                credit,
                ..item.head
            };
            if *seq != 0 && !*new {
                let copy = p.tx.next_copy(*seq).unwrap_or(0);
                head.flags |= flags::RETRANSMIT | u16::from(copy) << flags::COPY_SHIFT;
            }
            if head.kind() == Kind::Ack {
                if let Some((repaired, copy)) = p.rx.take_repaired() {
                    head.flags |= flags::REPAIRED | u16::from(copy) << flags::COPY_SHIFT;
                    head.peer_seq = repaired;
                }
            }
            if body(item).is_none() {
                head.kind = Kind::Nop.into();
                head.payload_len = 0;
            }
            heads.push(head.to_bytes());
        }
        let frames: Vec<(Mac, [IoSlice<'_>; 2])> = batch
            .iter()
            .zip(heads.iter())
            .map(|((rank, _, item, _), h)| {
                let body = body(item).unwrap_or_default();
                (self.peers[rank].mac, [IoSlice::new(h), IoSlice::new(body)])
            })
            .collect();
        match self.sock.send_batch(&frames) {
            Ok(n) => {
                self.counters.tx_frames += n as u64;

                self.counters.tx_bytes += frames[..n]
                    .iter()
                    .map(|f| (f.1[0].len() + f.1[1].len()) as u64)
                    .sum::<u64>();
                Ok(n)
            }
            Err(e)
                if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::ENOBUFS))
                    || e.kind() == io::ErrorKind::Interrupted =>
            {
                Ok(0)
            }
            Err(e) => Err(io_err(None, e)),
        }
    }
}
