//! Any bytes given to the multicast receive check (`transport::mcast::accept`: lengths,
//! version, kind, checksum, cookie or its tag, receiver, sender's address) give a frame or a
//! drop, never a panic; what is accepted decodes into a protocol message (or is a probe),
//! re-encodes to the same header (32 bytes for data, 64 for the rest), and its payload is the
//! announced length. The first byte picks the source (rank 0's address, rank 1's, a
//! stranger's) and whether the job filter and the checksum are sealed anew, since random bytes
//! almost never pass the CRC32C.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pipecast::transport::mcast::codec::decode;
use pipecast::transport::mcast::{accept, Source};
use pipecast::wire::mcast::{cookie_tag, Frame, Header, Kind};

const COOKIE: u64 = 0x3232_c0de;

fuzz_target!(|data: &[u8]| {
    let Some((&control, rest)) = data.split_first() else { return };
    let mut bytes = rest.to_vec();
    if control & 1 == 1 {
        if let Ok(f) = Frame::new_checked(&bytes[..]) {
            let mut header = Header::parse(&f);
            match &mut header {
                Header::Data(d) => d.tag = cookie_tag(COOKIE),
                Header::Control(r) => r.cookie = COOKIE,
            }
            let payload = f.payload().to_vec();
            if let Ok(h) = header.to_bytes(&payload) {
                bytes[..h.len()].copy_from_slice(&h);
            }
        }
    }
    let macs = [[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]];
    let source = Source::Mac(match control >> 1 & 3 {
        0 => macs[0],
        1 => macs[1],
        _ => [2, 0, 0, 0, 0, 9],
    });
    let is_rank = |r: usize, s: &Source| matches!(s, Source::Mac(m) if macs.get(r) == Some(m));
    let Ok((header, payload)) = accept(&bytes, &source, 1, COOKIE, &is_rank) else { return };
    match header {
        Header::Data(d) => {
            assert_eq!(payload.len(), usize::from(d.count));
        }
        Header::Control(r) => {
            assert!(payload.is_empty());
            assert_ne!(r.kind, Kind::Data);
        }
    }
    assert_eq!(decode(&header).is_none(), header.kind() == Kind::Probe);
    let again = header.to_bytes(payload).expect("an accepted header re-encodes");
    assert_eq!(again[..], bytes[..again.len()]);
});
