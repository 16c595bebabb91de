//! The engine message header of the stream links (`wire/message.rs`): any bytes parse to a
//! message or an error, never a panic; whatever parses emits a header that parses to the
//! same message; a data header's announced lengths either fit what a process could hold
//! (`transport::limits::announced`, checked before the link sizes memory from them) or get
//! an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pipecast::engine::Message;
use pipecast::transport::limits::announced;
use pipecast::wire::message::{emit, parse};

fuzz_target!(|data: &[u8]| {
    let Ok(message) = parse(data) else { return };
    let again = emit(&message);
    assert_eq!(parse(&again).expect("an emitted header parses"), message);
    if let Message::Data(h) = message {
        for ceiling in [0, 16 << 30, isize::MAX as u64] {
            if announced(3, &h, ceiling).is_ok() {
                assert!(u64::from(h.len) <= h.msize && h.msize <= ceiling);
            }
        }
    }
});
