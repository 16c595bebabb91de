//! The whole raw Ethernet receive path, without a socket: sequences of frames go into a
//! [`FrameLink`] (lengths, version, checksum, peer, cookie and communicator checks, the
//! per-peer reliability, segment reassembly, delivery into a posted broadcast's buffer or a
//! held one), and after each the link answers (queue, send into a sink that takes all).
//! Nothing may panic or allocate without bound; an error (a peer that passed every check sent
//! something impossible) ends the sequence, as it ends the broadcast.
//!
//! Input: the first 4 bytes choose the posted broadcast (message size, segment size, tree),
//! then records of `control u8, length u16 LE, length bytes` (at most 64). Control bits:
//! 0-1 sender (rank 0's MAC, rank 2's, an unknown MAC, this rank's own), 2 cut short by the
//! kernel, 3 seal (write version, cookie, communicator, ranks, payload length and checksum:
//! random bytes would otherwise almost never pass the checksum), 4 also aim it at the posted
//! broadcast (its sequence, root, sizes, a segment and an offset in it), 5 let 50 ms pass
//! before it, 6 (sealed) claim the other rank of the sender's MAC (rank 3 shares rank 0's
//! host and NIC) or, for rank 2's MAC, a rank whose MAC it is not, 7 (sealed) address it to
//! rank 3, not this rank.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pipecast::engine::drive::Engine;
use pipecast::engine::{Bcast, Config as EngineConfig, Setup};
use pipecast::plan::Lane;
use pipecast::transport::raweth::{Config, FrameLink};
use pipecast::transport::{Buffer, Buffers, TransportError};
use pipecast::wire::frame::{Frame, Kind, HEADER_LEN};

const ME: usize = 1;
const COOKIE: u64 = 0x5eed_c0de;
const PAYLOAD: usize = 8908;

fn mac(rank: usize) -> [u8; 6] {
    [2, 0, 0, 0, 0, rank as u8 + 1]
}

fuzz_target!(|data: &[u8]| {
    let Some((head, mut rest)) = data.split_first_chunk::<4>() else {
        return;
    };
    let msize = u64::from(u16::from_le_bytes([head[0], head[1]])) * 7 + u64::from(head[2] & 7);
    let segment = [1000u64, 1408, 4096, 8908, 65536][usize::from(head[3] % 5)];
    let lanes = if head[3] & 0x80 == 0 {
        vec![Lane::chain(3, &[0, 1, 2])]
    } else {
        pipecast::comm::scatter_allgather(3, 0)
    };
    let config = Config {
        max_payload: Some(PAYLOAD),
        ..Config::default()
    };
    let mut link = FrameLink::new(ME, mac(ME), config, PAYLOAD);
    // Rank 3 shares rank 0's host and MAC (two ranks per host).
    let macs = vec![vec![mac(0), mac(ME), mac(2), mac(0)]];
    link.set_rail_peers_on_hosts(macs, &[0, 1, 2, 0], COOKIE)
        .expect("MACs shared only within a host");
    let setup = Setup {
        seq: 1,
        root: 0,
        msize,
        segment,
        deep: head[3] & 0x40 != 0,
    };
    let mut endpoint = Engine::new();
    let mut bufs = Buffers::new();
    bufs.insert(1, Buffer::Owned(vec![0; msize as usize]));
    let Ok(bcast) = Bcast::new(ME, &lanes, setup, EngineConfig::default(), 0) else {
        return;
    };
    let buf = bufs.get_mut(&1).expect("inserted").as_mut_slice();
    if endpoint.post(bcast, buf, 0).is_err() {
        return;
    }
    let mut now = 1u64;
    let mut frame = Vec::new();
    for _ in 0..64 {
        let Some((&[control, lo, hi], tail)) = rest.split_first_chunk::<3>() else {
            break;
        };
        let len = usize::from(u16::from_le_bytes([lo, hi])).min(tail.len());
        frame.clear();
        frame.extend_from_slice(&tail[..len]);
        rest = &tail[len..];
        let from = match control & 3 {
            0 => mac(0),
            1 => mac(2),
            2 => [2, 0, 0, 0, 0, 9],
            _ => mac(ME),
        };
        if control & 0x20 != 0 {
            now += 50_000_000;
        }
        if control & 0x08 != 0 && frame.len() >= HEADER_LEN {
            aim(&mut frame, control & 0x10 != 0, msize, segment, lanes.len());
            let mut f = Frame::new_unchecked(&mut frame[..]);
            let claims = match (control & 3, control & 0x40 != 0) {
                (1, false) => 2,
                (_, true) => 3,
                _ => 0,
            };
            f.set_from(claims);
            f.set_to(if control & 0x80 != 0 { 3 } else { ME as u32 });
            f.seal(&mac(ME), &from);
        }
        let truncated = control & 0x04 != 0;
        if link
            .receive_frame(&mut bufs, &mut endpoint, now, from, truncated, &frame)
            .is_err()
        {
            return;
        }
        if endpoint.handle_timeout(now).is_err() || link.queue(&mut endpoint).is_err() {
            return;
        }
        if link.check_liveness(now, &endpoint).is_err() {
            return;
        }
        let sent = link.send(&bufs, now, &mut |_rail, frames| {
            Ok::<usize, TransportError>(frames.len())
        });
        if sent.is_err() {
            return;
        }
        if endpoint.is_done(1) {
            endpoint.finish(1);
            bufs.remove(&1);
            link.forget_finished(&bufs);
        }
    }
});

/// Makes `frame` pass the checks before the checksum and carry this job's cookie; with
/// `posted`, a data frame of the posted broadcast within one of its segments.
fn aim(frame: &mut [u8], posted: bool, msize: u64, segment: u64, lanes: usize) {
    let avail = frame.len() - HEADER_LEN;
    let mut f = Frame::new_unchecked(&mut frame[..]);
    f.set_version(pipecast::wire::frame::VERSION);
    f.set_cookie(COOKIE);
    f.set_comm(0);
    let mut len = avail.min(0xffff);
    if posted {
        f.set_kind(Kind::Data);
        f.set_bcast_seq(1);
        f.set_root(0);
        f.set_msize(msize);
        f.set_segment(segment as u32);
        f.set_lanes(lanes as u16);
        f.set_lane(f.lane() % lanes as u16);
        let segments = msize.div_ceil(segment).max(1);
        let index = u64::from(f.index()) % segments;
        f.set_index(index as u32);
        let seg_len = (msize - (index * segment).min(msize)).min(segment) as usize;
        f.set_segment_len(seg_len as u32);
        let offset = (f.offset() as usize).min(seg_len);
        f.set_offset(offset as u32);
        len = len.min(seg_len - offset);
    }
    f.set_payload_len(len as u16);
}
