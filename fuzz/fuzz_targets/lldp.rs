//! Any bytes given to the LLDP parser give a value or an error, never a panic; whatever
//! parses re-emits and parses back to the same thing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pipecast::wire::ethernet::Address;
use pipecast::wire::lldp::{self, LldpduRepr, TlvIter};

fuzz_target!(|data: &[u8]| {
    for tlv in TlvIter::new(data) {
        let _ = tlv;
    }
    let _ = LldpduRepr::parse(data);
    if let Ok((_, repr)) = lldp::parse_frame(data) {
        let _ = (repr.chassis_text(), repr.port_text(), repr.switch_name());
        let mut buf = vec![0u8; 14 + repr.buffer_len()];
        let n = lldp::emit_frame(Address([2, 0, 0, 0, 0, 1]), &repr, &mut buf)
            .expect("a parsed LLDPDU re-emits");
        let (_, back) = lldp::parse_frame(&buf[..n]).expect("an emitted LLDPDU parses");
        assert_eq!(back, repr);
    }
});
