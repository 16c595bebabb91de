//! Any bytes given to the pipecast frame parser give a frame or an error, never a panic;
//! whatever parses re-emits to the same header.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pipecast::wire::frame::{Frame, Repr};

fuzz_target!(|data: &[u8]| {
    if let Ok(frame) = Frame::new_checked(data) {
        let repr = Repr::parse(&frame);
        let _ = frame.payload();
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut Frame::new_unchecked(&mut buf[..]))
            .expect("a parsed header re-emits");
        let again = Repr::parse(&Frame::new_checked(&buf[..]).expect("re-emitted frame parses"));
        assert_eq!(again, repr);
    }
});
