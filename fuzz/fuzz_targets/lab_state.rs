//! The lab state file (`<run root>/<lab>/state.json`, `lab/state.rs`): any text parses to a
//! lab state or is refused, never a panic; what parses serializes and parses back the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pipecast::lab::LabState;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(state) = serde_json::from_str::<LabState>(&text) else { return };
    let again = serde_json::to_string(&state).expect("a lab state serializes");
    assert_eq!(serde_json::from_str::<LabState>(&again).expect("it parses back"), state);
});
