//! Any bytes given to the pipecast frame parser give a frame or an error, never a panic;
//! whatever parses re-emits to the same header.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pipecast::wire::frame::{Frame, Repr, HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    let Ok(frame) = Frame::new_checked(data) else { return };
    let Ok(repr) = Repr::parse(&frame) else { return };
    let mut buf = vec![0u8; HEADER_LEN.max(repr.buffer_len())];
    repr.emit(&mut Frame::new_unchecked(&mut buf[..]));
    let again = Frame::new_checked(&buf[..]).expect("a re-emitted header is well-formed");
    assert_eq!(Repr::parse(&again).expect("a re-emitted header parses"), repr);
});
