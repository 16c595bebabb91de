//! The bootstrap blob (`wire/bootstrap.rs`, the address blob every rank sends at communicator
//! creation) and the 24-byte connection hellos (`wire/hello.rs`, of the rendezvous and of the
//! TCP transport) and the joining blob (`wire/joining.rs`, the first round of a communicator
//! joined on existing engines): any bytes parse or are refused, never a panic; whatever parses
//! re-emits to bytes that parse to the same thing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pipecast::wire::{bootstrap::Repr, hello, joining};

fuzz_target!(|data: &[u8]| {
    for magic in [hello::RENDEZVOUS, hello::TCP_LINK] {
        if let Some((a, b)) = hello::parse(magic, data) {
            assert_eq!(&hello::emit(magic, a, b)[..], data);
        }
    }
    if let Ok(join) = joining::Repr::parse(data) {
        let bytes = join.to_vec().expect("a parsed joining blob re-emits");
        assert_eq!(
            joining::Repr::parse(&bytes).expect("an emitted joining blob parses"),
            join
        );
    }
    let Ok(repr) = Repr::parse(data) else { return };
    let bytes = repr.to_vec().expect("a parsed blob re-emits");
    assert_eq!(bytes.len(), repr.buffer_len());
    assert_eq!(Repr::parse(&bytes).expect("an emitted blob parses"), repr);
});
