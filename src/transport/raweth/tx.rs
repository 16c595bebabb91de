//! The sending half of [`RawEthTransport`]: engine transmits cut into frames and queued on
//! the lossy-path adapter ([`Lossy`](crate::engine::reliable::Lossy)), which says what to
//! send next; frames, sealed with their checksum, leave in batches through the rail's port,
//! acknowledgements piggybacked. Up to the batch, it is [`FrameLink::send`]: no socket.
//! With several rails, a lane's frames go on its rail (`Outgoing::rail`), each rail's
//! reliability hands out its own frames, and each batch goes to its rail's socket.

use super::{io_err, FrameLink, RawEthTransport};
use crate::engine::reliable::{Frame, Piece};
use crate::engine::Message;
use crate::transport::raweth::socket::Mac;
use crate::transport::{Buffers, Driver, TransportError};
use crate::wire::frame::{flags, Kind, Repr};
use std::collections::BTreeMap;
use std::io::IoSlice;

/// Frames of a batch: each to a MAC address, as its sealed header and its payload.
pub type Batch<'a> = [(Mac, [IoSlice<'a>; 2])];

impl RawEthTransport {
    /// Sends what the link has to send, each rail through its own port; a full port marks
    /// its rail blocked (until a poll).
    pub(super) fn send(&mut self, bufs: &Buffers, now: u64) -> Result<(), TransportError> {
        let ports = &mut self.ports;
        self.link.send(bufs, now, &mut |rail, frames| {
            ports[rail].send(frames).map_err(|e| io_err(None, e))
        })?;
        Ok(())
    }
}

impl FrameLink {
    /// Turns the driver's messages to this link's peers ([`FrameLink::knows`]) into frames
    /// on each peer's queue (the lossy adapter cuts segments into frames); messages to other
    /// ranks are left to the link that reaches them.
    pub fn queue(&mut self, driver: &mut dyn Driver) -> Result<(), TransportError> {
        let peers = std::mem::take(&mut self.addrs.peers);
        // The engine ignores the time here.
        while let Some(t) = driver.next(0, &|p| peers.contains(&p)) {
            // Lane i of a plan on rails leaves through NIC i (its data, and its credits back).
            let rail = self.rail(t.rail);
            self.reliable[rail].queue(t.to, t.message, t.payload);
        }
        self.addrs.peers = peers;
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

    /// [`FrameLink::send`] on one rail: its lossy adapter hands out the frames, this writes
    /// their headers.
    fn send_rail(
        &mut self,
        rail: usize,
        bufs: &Buffers,
        now: u64,
        out: &mut dyn FnMut(usize, &Batch<'_>) -> Result<usize, TransportError>,
    ) -> Result<bool, TransportError> {
        let base = self.head(Kind::Data);
        let FrameLink {
            reliable,
            addrs,
            own,
            config,
            counters,
            rail_bytes,
            ..
        } = self;
        let (macs, own) = (&addrs.macs[rail], &own[rail]);
        let checksum = config.checksum;
        reliable[rail].send(now, &mut |batch: &[Frame]| {
            let n = transmit(rail, bufs, &base, macs, own, checksum, batch, out)?;
            counters.tx_frames += n.0 as u64;
            counters.tx_bytes += n.1;
            rail_bytes[rail] += n.1;
            Ok(n.0)
        })
    }
}

/// The header of `frame`: `base` (this link's cookie, communicator and rank) with the
/// frame's content, sequence and acknowledgement fields.
fn repr(base: &Repr, frame: &Frame) -> Repr {
    let mut head = Repr {
        peer_seq: frame.seq,
        ack: frame.ack,
        sack: frame.sack,
        credit: frame.credit,
        to: frame.peer as u32,
        ..*base
    };
    match &frame.piece {
        None => head.kind = Kind::Ack.into(),
        Some(Piece::Heartbeat) => head.kind = Kind::Nop.into(),
        Some(Piece::Message {
            message,
            offset,
            payload,
        }) => match *message {
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
                head.offset = *offset;
                head.payload_len = payload.len() as u16;
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
            }
            Message::Done { seq, lane } => {
                head.kind = Kind::Done.into();
                head.bcast_seq = seq;
                head.lane = lane;
            }
        },
    }
    if let Some(copy) = frame.copy {
        head.flags |= flags::RETRANSMIT | u16::from(copy) << flags::COPY_SHIFT;
    }
    if let Some((repaired, copy)) = frame.repaired {
        head.flags |= flags::REPAIRED | u16::from(copy) << flags::COPY_SHIFT;
        head.peer_seq = repaired;
    }
    head
}

/// Writes the frames' headers (sealed with their checksum when `checksum`) and gives the
/// batch to `out`; returns how many frames it took and their bytes.
#[allow(clippy::too_many_arguments)] // the rail's addresses and the link's batch writer
fn transmit(
    rail: usize,
    bufs: &Buffers,
    base: &Repr,
    macs: &BTreeMap<usize, Mac>,
    own: &Mac,
    checksum: bool,
    batch: &[Frame],
    out: &mut dyn FnMut(usize, &Batch<'_>) -> Result<usize, TransportError>,
) -> Result<(usize, u64), TransportError> {
    // A data frame's payload comes from its broadcast's buffer; once the broadcast is over
    // here (its buffer gone), a retransmission of it is a no-op that only fills its number.
    let body = |frame: &Frame| -> Option<&[u8]> {
        match &frame.piece {
            Some(Piece::Message {
                message, payload, ..
            }) if !payload.is_empty() => bufs
                .get(&message.seq())
                .and_then(|b| b.as_slice().get(payload.clone())),
            _ => Some(&[]),
        }
    };
    let mut heads = Vec::with_capacity(batch.len());
    for f in batch {
        let mut head = repr(base, f);
        let payload = body(f).unwrap_or_else(|| {
            head.kind = Kind::Nop.into();
            head.payload_len = 0;
            &[]
        });
        heads.push(if checksum {
            head.to_bytes(&macs[&f.peer], own, payload)
        } else {
            head.to_bytes_unsealed()
        });
    }
    let frames: Vec<(Mac, [IoSlice<'_>; 2])> = batch
        .iter()
        .zip(heads.iter())
        .map(|(f, h)| {
            let body = body(f).unwrap_or_default();
            (macs[&f.peer], [IoSlice::new(h), IoSlice::new(body)])
        })
        .collect();
    let n = out(rail, &frames)?.min(frames.len());
    let bytes = frames[..n]
        .iter()
        .map(|f| (f.1[0].len() + f.1[1].len()) as u64)
        .sum::<u64>();
    Ok((n, bytes))
}
