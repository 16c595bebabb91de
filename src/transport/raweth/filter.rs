//! One filter per rank: the classic BPF program each raw Ethernet socket filters its frames
//! with. Ranks of one host share its NIC, and the kernel copies every frame of our EtherType
//! into every packet socket bound to the interface: with K ranks per host, each would receive
//! (and check, and drop) the frames of all K. [`RawSocket::set_rank_filter`] attaches a
//! classic BPF program ([`rank_filter`], `SO_ATTACH_FILTER`) that accepts only
//! frames whose header `to` field (wire/frame.rs, offset 92) is this socket's rank, so each
//! frame is copied into one socket only, the ring's ([`super::ring`]) as well as `recvmmsg`'s
//! (the filter belongs to the socket). It also refuses the host's own outgoing frames
//! (`PACKET_OUTGOING`): every socket on an interface sees the frames the other sockets there
//! send (packet taps), which the receive path used to copy and skip. Frames of another header
//! version pass, so that the link counts them (`dropped_version`); a frame too short to
//! hold `to` is dropped by the kernel.

#[cfg(doc)]
use super::socket::RawSocket;
use super::socket::ETHERTYPE;

/// The classic BPF program of [`RawSocket::set_rank_filter`]: drop the host's own outgoing
/// frames and other EtherTypes, pass frames of another header version (the link counts
/// them), and of the current version keep those whose `to` rank is `rank`. A `SOCK_DGRAM`
/// packet socket's filter sees the frame from the network header on: offset 0 is our
/// header's version byte. Word loads are big-endian, `to` is little-endian: the constant is
/// its bytes read that way.
pub fn rank_filter(rank: u32) -> Vec<libc::sock_filter> {
    use crate::wire::frame::{TO_OFFSET, VERSION};
    let op = |code: u32, jt: u8, jf: u8, k: u32| libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    };
    let ancillary = |what: i32| (libc::SKF_AD_OFF + what) as u32;
    let (ld_w, ld_b) = (
        libc::BPF_LD | libc::BPF_W | libc::BPF_ABS,
        libc::BPF_LD | libc::BPF_B | libc::BPF_ABS,
    );
    let jeq = libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K;
    let ret = libc::BPF_RET | libc::BPF_K;
    // Jumps are relative to the next instruction: ACCEPT is 8, DROP is 9.
    vec![
        /* 0 */ op(ld_w, 0, 0, ancillary(libc::SKF_AD_PKTTYPE)),
        /* 1 */ op(jeq, 7, 0, u32::from(libc::PACKET_OUTGOING)),
        /* 2 */ op(ld_w, 0, 0, ancillary(libc::SKF_AD_PROTOCOL)),
        /* 3 */ op(jeq, 0, 5, u32::from(ETHERTYPE)),
        /* 4 */ op(ld_b, 0, 0, 0),
        /* 5 */ op(jeq, 0, 2, u32::from(VERSION)),
        /* 6 */ op(ld_w, 0, 0, TO_OFFSET as u32),
        /* 7 */ op(jeq, 0, 1, u32::from_be_bytes(rank.to_le_bytes())),
        /* 8 */ op(ret, 0, 0, u32::MAX),
        /* 9 */ op(ret, 0, 0, 0),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a classic BPF program of the few instructions [`rank_filter`] uses over a frame
    /// (bytes from the network header on) with the given packet type and protocol, as the
    /// kernel does: a load beyond the frame ends the program with 0 (drop).
    fn run_filter(program: &[libc::sock_filter], frame: &[u8], pkttype: u8, proto: u16) -> u32 {
        let (mut pc, mut a) = (0usize, 0u32);
        loop {
            let i = &program[pc];
            let code = u32::from(i.code);
            pc += 1;
            if code == libc::BPF_RET | libc::BPF_K {
                return i.k;
            } else if code & 0x07 == libc::BPF_LD {
                let k = i.k as i32;
                a = if k == libc::SKF_AD_OFF + libc::SKF_AD_PKTTYPE {
                    u32::from(pkttype)
                } else if k == libc::SKF_AD_OFF + libc::SKF_AD_PROTOCOL {
                    u32::from(proto)
                } else {
                    let at = i.k as usize;
                    let n = if code & 0x18 == libc::BPF_B { 1 } else { 4 };
                    let Some(b) = frame.get(at..at + n) else {
                        return 0;
                    };
                    b.iter().fold(0, |v, &x| v << 8 | u32::from(x))
                };
            } else {
                assert_eq!(code, libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K);
                pc += usize::from(if a == i.k { i.jt } else { i.jf });
            }
        }
    }

    /// The filter keeps exactly this rank's frames of the current version (and frames of
    /// other versions, for the counters), and drops outgoing frames, other EtherTypes, other
    /// ranks' frames and frames too short to name a rank.
    #[test]
    fn the_rank_filter_keeps_only_this_ranks_frames() {
        use crate::wire::frame::{Repr, HEADER_LEN};
        let frame = |to: u32| {
            let mut b = Repr {
                to,
                from: 9,
                ..Repr::default()
            }
            .to_bytes_unsealed()
            .to_vec();
            b.extend_from_slice(b"payload");
            b
        };
        let host = libc::PACKET_HOST;
        for rank in [0u32, 1, 7, 0x0102_0304, u32::MAX] {
            let p = rank_filter(rank);
            assert_ne!(run_filter(&p, &frame(rank), host, ETHERTYPE), 0, "{rank}");
            assert_ne!(
                run_filter(&p, &frame(rank), libc::PACKET_OTHERHOST, ETHERTYPE),
                0
            );
            assert_eq!(run_filter(&p, &frame(rank ^ 1), host, ETHERTYPE), 0);
            assert_eq!(run_filter(&p, &frame(rank ^ 0x100), host, ETHERTYPE), 0);
            assert_eq!(
                run_filter(&p, &frame(rank), libc::PACKET_OUTGOING, ETHERTYPE),
                0
            );
            assert_eq!(run_filter(&p, &frame(rank), host, 0x0800), 0);
            assert_eq!(
                run_filter(&p, &frame(rank)[..HEADER_LEN - 5], host, ETHERTYPE),
                0
            );
            let mut old = frame(rank ^ 1);
            old[0] = 2;
            assert_ne!(run_filter(&p, &old, host, ETHERTYPE), 0, "version 2 passes");
        }
    }
}
