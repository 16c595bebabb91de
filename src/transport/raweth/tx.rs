//! The sending half of [`RawEthTransport`]: engine transmits cut into frames and queued on
//! the per-peer reliability ([`Peers`](crate::engine::reliable::Peers)), which says what to
//! send next; frames, sealed with their checksum, leave in `sendmmsg` batches,
//! acknowledgements piggybacked. Up to the batch, it is [`FrameLink::send`]: no socket.
//! With several rails, a lane's frames go on its rail (`Outgoing::rail`), each rail's
//! reliability hands out its own frames, and each batch goes to its rail's socket.

use super::{io_err, FrameLink, Item, RawEthTransport};
use crate::engine::reliable::Outgoing;
use crate::engine::Message;
use crate::transport::raweth::socket::Mac;
use crate::transport::{Buffers, Driver, TransportError};
use crate::wire::frame::{flags, Kind, Repr};
use std::io::{self, IoSlice};

/// Frames of a batch: each to a MAC address, as its sealed header and its payload.
pub type Batch<'a> = [(Mac, [IoSlice<'a>; 2])];

impl RawEthTransport {
    /// Sends what the link has to send, each rail through its own socket; a full socket
    /// buffer marks its rail blocked (until a poll).
    pub(super) fn send(&mut self, bufs: &Buffers, now: u64) -> Result<(), TransportError> {
        let socks = &self.socks;
        self.link.send(
            bufs,
            now,
            &mut |rail, frames| match socks[rail].send_batch(frames) {
                Ok(n) => Ok(n),
                Err(e)
                    if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::ENOBUFS))
                        || e.kind() == io::ErrorKind::Interrupted =>
                {
                    Ok(0)
                }
                Err(e) => Err(io_err(None, e)),
            },
        )?;
        Ok(())
    }
}

impl FrameLink {
    /// Turns the driver's messages to this link's peers ([`FrameLink::knows`]) into frames
    /// on each peer's queue; messages to other ranks are left to the link that reaches them.
    pub fn queue(&mut self, driver: &mut dyn Driver) -> Result<(), TransportError> {
        let peers = std::mem::take(&mut self.peers);
        // The engine ignores the time here.
        while let Some(t) = driver.next(0, &|p| peers.contains(&p)) {
            // Lane i of a plan on rails leaves through NIC i (its data, and its credits back).
            let rail = self.rail(t.rail);
            let mut head = self.head(Kind::Data);
            let max_payload = self.max_payload;
            let reliable = &mut self.reliable[rail];
            match t.message {
                Message::Data(h) => {
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
                        let len = (t.payload.len() - off).min(max_payload);
                        let start = t.payload.start + off;
                        reliable.enqueue(
                            t.to,
                            Item {
                                head: Repr {
                                    offset: off as u32,
                                    payload_len: len as u16,
                                    ..head
                                },
                                payload: start..start + len,
                            },
                        );
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
                    reliable.enqueue(
                        t.to,
                        Item {
                            head,
                            payload: 0..0,
                        },
                    );
                }
                Message::Done { seq, lane } => {
                    head.kind = Kind::Done.into();
                    head.bcast_seq = seq;
                    head.lane = lane;
                    reliable.enqueue(
                        t.to,
                        Item {
                            head,
                            payload: 0..0,
                        },
                    );
                }
            }
        }
        self.peers = peers;
        Ok(())
    }

    /// Sends what the per-peer reliability hands out (retransmissions first, peers in turn,
    /// within credit and pacing) in batches given to `out`, then bare acks to peers owed one;
    /// each rail in turn, its batches to `out(rail, batch)`. `out` returns how many frames of
    /// the batch it took (fewer when the socket is full: that rail is then blocked, the others
    /// go on). Returns whether some rail's `out` took fewer than it was given.
    pub fn send(
        &mut self,
        bufs: &Buffers,
        now: u64,
        out: &mut dyn FnMut(usize, &Batch<'_>) -> Result<usize, TransportError>,
    ) -> Result<bool, TransportError> {
        let mut full = false;
        for rail in 0..self.rails() {
            let refused = self.send_rail(rail, bufs, now, out)?;
            self.blocked[rail] |= refused;
            full |= refused;
        }
        Ok(full)
    }

    /// [`FrameLink::send`] on one rail.
    fn send_rail(
        &mut self,
        rail: usize,
        bufs: &Buffers,
        now: u64,
        out: &mut dyn FnMut(usize, &Batch<'_>) -> Result<usize, TransportError>,
    ) -> Result<bool, TransportError> {
        let mut full = false;
        self.reliable[rail].handle_timeout(now);
        let most = self.config.batch.max(1);
        loop {
            let mut batch: Vec<Outgoing<Item>> = Vec::with_capacity(most);
            while batch.len() < most {
                match self.reliable[rail].poll_send(now) {
                    Some(o) => batch.push(o),
                    None => break,
                }
            }
            if batch.is_empty() {
                break;
            }
            let sent = self.transmit(rail, bufs, &batch, out)?;
            for o in &batch[..sent] {
                self.reliable[rail].sent(o.peer, o.seq, now);
            }
            for o in batch[sent..].iter().rev() {
                self.reliable[rail].unsent(o.peer, o.seq);
            }
            if sent < batch.len() {
                self.counters.send_blocked += 1;
                full = true;
                break;
            }
        }
        // Bare acks.
        let owed = self.reliable[rail].owed_acks();
        for chunk in owed.chunks(most) {
            let batch: Vec<Outgoing<Item>> = chunk
                .iter()
                .map(|&peer| Outgoing {
                    peer,
                    seq: 0,
                    item: Item {
                        head: self.head(Kind::Ack),
                        payload: 0..0,
                    },
                    copy: None,
                })
                .collect();
            let sent = self.transmit(rail, bufs, &batch, out)?;
            self.counters.acks_sent += sent as u64;
            if sent < batch.len() {
                full = true;
                break;
            }
        }
        Ok(full)
    }

    /// Writes headers (with each peer's current ack, sealed with their checksum) and gives a
    /// batch to `out`; returns how many frames it took.
    fn transmit(
        &mut self,
        rail: usize,
        bufs: &Buffers,
        batch: &[Outgoing<Item>],
        out: &mut dyn FnMut(usize, &Batch<'_>) -> Result<usize, TransportError>,
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
        for o in batch {
            let (ack, sack, credit) = self.reliable[rail].piggyback(o.peer);
            let mut head = Repr {
                peer_seq: o.seq,
                ack,
                sack,
                credit,
                to: o.peer as u32,
                ..o.item.head
            };
            if let Some(copy) = o.copy {
                head.flags |= flags::RETRANSMIT | u16::from(copy) << flags::COPY_SHIFT;
            }
            if head.kind() == Kind::Ack {
                if let Some((repaired, copy)) = self.reliable[rail].take_repaired(o.peer) {
                    head.flags |= flags::REPAIRED | u16::from(copy) << flags::COPY_SHIFT;
                    head.peer_seq = repaired;
                }
            }
            let payload = body(&o.item).unwrap_or_else(|| {
                head.kind = Kind::Nop.into();
                head.payload_len = 0;
                &[]
            });
            heads.push(if self.config.checksum {
                head.to_bytes(&self.macs[rail][&o.peer], &self.own[rail], payload)
            } else {
                head.to_bytes_unsealed()
            });
        }
        let frames: Vec<(Mac, [IoSlice<'_>; 2])> = batch
            .iter()
            .zip(heads.iter())
            .map(|(o, h)| {
                let body = body(&o.item).unwrap_or_default();
                (
                    self.macs[rail][&o.peer],
                    [IoSlice::new(h), IoSlice::new(body)],
                )
            })
            .collect();
        let n = out(rail, &frames)?.min(frames.len());
        let bytes = frames[..n]
            .iter()
            .map(|f| (f.1[0].len() + f.1[1].len()) as u64)
            .sum::<u64>();
        self.counters.tx_frames += n as u64;
        self.counters.tx_bytes += bytes;
        self.rail_bytes[rail] += bytes;
        Ok(n)
    }
}
