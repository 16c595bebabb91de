//! The pipecast frame header: arbitrary bytes never panic, every header round-trips.

use pipecast::wire::frame::{Frame, Kind, Repr, HEADER_LEN};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(f) = Frame::new_checked(&bytes[..]) {
            let r = Repr::parse(&f);
            prop_assert!(f.payload().len() == r.length as usize);
            prop_assert!(bytes.len() >= HEADER_LEN + r.length as usize);
        }
    }

    #[test]
    fn headers_round_trip(
        kind in any::<u8>(), flags in any::<u16>(), cookie in any::<u32>(), communicator in any::<u32>(),
        sequence in any::<u32>(), lane in any::<u16>(), segment in any::<u32>(), offset in any::<u64>(),
        payload in proptest::collection::vec(any::<u8>(), 0..100), ack in any::<u32>(), credit in any::<u32>(),
    ) {
        let repr = Repr {
            kind: Kind::from(kind), flags, cookie, communicator, sequence, lane, segment, offset,
            length: payload.len() as u32, ack, credit,
        };
        let mut buf = vec![0u8; repr.buffer_len().max(60)];
        let mut f = Frame::new_unchecked(&mut buf[..]);
        repr.emit(&mut f).unwrap();
        f.payload_mut()[..payload.len()].copy_from_slice(&payload);
        let back = Frame::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(Repr::parse(&back), repr);
        prop_assert_eq!(back.payload(), &payload[..]);
    }
}
