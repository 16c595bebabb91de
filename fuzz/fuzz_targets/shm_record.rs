//! Any bytes given to the shared-memory record parser give a record or an error, never a
//! panic; whatever parses re-encodes to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pipecast::wire::shm::Record;

fuzz_target!(|data: &[u8]| {
    let Ok(record) = Record::decode(data) else { return };
    assert_eq!(&record.encode()[..], data, "a record re-encodes to its bytes");
});
