//! The TCP transport's 40-byte frame header (`transport/frame.rs`): any bytes decode to a
//! message or an error, never a panic; whatever decodes re-encodes to a header that decodes to
//! the same message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pipecast::transport::frame::{decode, encode, HEADER};

fuzz_target!(|data: &[u8]| {
    let Some(head) = data.get(..HEADER) else { return };
    let head: &[u8; HEADER] = head.try_into().expect("HEADER bytes");
    let Ok(message) = decode(1, head) else { return };
    let again = encode(&message);
    assert_eq!(decode(1, &again).expect("a re-encoded header decodes"), message);
});
