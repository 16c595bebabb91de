//! The engine message header of the stream links (`wire/message.rs`): any bytes parse to a
//! message or an error, never a panic; whatever parses emits a header that parses to the
//! same message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pipecast::wire::message::{emit, parse};

fuzz_target!(|data: &[u8]| {
    let Ok(message) = parse(data) else { return };
    let again = emit(&message);
    assert_eq!(parse(&again).expect("an emitted header parses"), message);
});
