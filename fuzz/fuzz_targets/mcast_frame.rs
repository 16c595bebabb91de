//! Any bytes given to the multicast receive check (`transport::mcast::accept`: lengths,
//! version, kind, checksum, cookie, receiver, sender's address) give a frame or a drop, never a
//! panic; what is accepted decodes into a protocol message (or is a probe), re-encodes to the
//! same header, and its payload is the announced length. The first byte picks the source
//! (rank 0's address, rank 1's, a stranger's) and whether the checksum is sealed anew, since
//! random bytes almost never pass the CRC32C.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pipecast::transport::mcast::codec::decode;
use pipecast::transport::mcast::{accept, Source};
use pipecast::wire::mcast::{Frame, Kind, Repr, HEADER_LEN};

const COOKIE: u64 = 0x3232_c0de;

fuzz_target!(|data: &[u8]| {
    let Some((&control, rest)) = data.split_first() else { return };
    let mut bytes = rest.to_vec();
    if control & 1 == 1 && bytes.len() >= HEADER_LEN {
        bytes[8..16].copy_from_slice(&COOKIE.to_le_bytes());
        if let Ok(f) = Frame::new_checked(&bytes[..]) {
            let repr = Repr::parse(&f);
            let payload = f.payload().to_vec();
            let header = repr.to_bytes(&payload);
            bytes[..HEADER_LEN].copy_from_slice(&header);
        }
    }
    let macs = [[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]];
    let source = Source::Mac(match control >> 1 & 3 {
        0 => macs[0],
        1 => macs[1],
        _ => [2, 0, 0, 0, 0, 9],
    });
    let is_rank = |r: usize, s: &Source| matches!(s, Source::Mac(m) if macs.get(r) == Some(m));
    let Ok((repr, payload)) = accept(&bytes, &source, 1, COOKIE, &is_rank) else { return };
    if repr.kind == Kind::Data {
        assert_eq!(payload.len(), repr.count as usize);
    } else {
        assert!(payload.is_empty());
    }
    assert_eq!(decode(&repr).is_none(), repr.kind == Kind::Probe);
    let again = repr.to_bytes(payload);
    assert_eq!(again[..], bytes[..HEADER_LEN]);
});
