//! LLDP parsing against frames captured from the lab's lldpd (tests/data/lldp/*.bin) and
//! against arbitrary bytes (which must never panic).

use pipecast::wire::ethernet::{self, Address};
use pipecast::wire::lldp::{self, LldpduRepr, TlvIter, TlvKind};
use proptest::prelude::*;
use std::path::Path;

fn vector(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/lldp")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn captured_switch_to_host_frame() {
    let frame = vector("switch_to_host.bin");
    let (eth, repr) = lldp::parse_frame(&frame).unwrap();
    assert_eq!(eth.dst_addr, Address::LLDP_NEAREST_BRIDGE);
    assert_eq!(repr.chassis_id.subtype, lldp::CHASSIS_SUBTYPE_LOCAL);
    assert_eq!(repr.chassis_text(), "s1");
    assert_eq!(repr.switch_name(), "s1");
    assert_eq!(repr.port_id.subtype, lldp::PORT_SUBTYPE_IFNAME);
    assert_eq!(repr.port_text(), "n0");
    assert!(repr.ttl > 0);
    // lldpd also sends description, capabilities, management address and 802.3 TLVs.
    let kinds: Vec<TlvKind> = TlvIter::new(&frame[ethernet::HEADER_LEN..])
        .map(|t| t.unwrap().kind())
        .collect();
    assert!(kinds.contains(&TlvKind::SystemCapabilities), "{kinds:?}");
    assert!(kinds.contains(&TlvKind::OrgSpecific), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&TlvKind::End));
}

#[test]
fn captured_switch_to_switch_frame() {
    let frame = vector("switch_to_switch.bin");
    let (_, repr) = lldp::parse_frame(&frame).unwrap();
    assert_eq!(repr.switch_name(), "s1");
    assert_eq!(repr.port_text(), "s0");
}

#[test]
fn captured_frames_reemit_their_mandatory_tlvs_identically() {
    for name in ["switch_to_host.bin", "switch_to_switch.bin"] {
        let frame = vector(name);
        let (_, repr) = lldp::parse_frame(&frame).unwrap();
        // Chassis, port and TTL are the first TLVs on the wire; emitting only those must give
        // the same bytes.
        let only = LldpduRepr {
            port_description: None,
            system_name: None,
            management_address: None,
            ..repr
        };
        let mut buf = [0u8; 600];
        let n = only.emit(&mut buf).unwrap();
        let mandatory = n - 2; // without End
        assert_eq!(
            &buf[..mandatory],
            &frame[ethernet::HEADER_LEN..ethernet::HEADER_LEN + mandatory],
            "{name}"
        );
    }
}

#[test]
fn every_truncation_of_a_real_frame_is_an_error_not_a_panic() {
    let frame = vector("switch_to_host.bin");
    for n in 0..frame.len() {
        let _ = lldp::parse_frame(&frame[..n]);
    }
    // Cutting inside the mandatory TLVs is always an error.
    for n in 0..ethernet::HEADER_LEN + 12 {
        assert!(lldp::parse_frame(&frame[..n]).is_err(), "cut at {n}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..700)) {
        let _ = lldp::parse_frame(&bytes);
        let _ = LldpduRepr::parse(&bytes);
        for tlv in TlvIter::new(&bytes) {
            let _ = tlv;
        }
    }

    /// Real frames with a few bytes changed: whatever still parses re-emits and parses back to
    /// the same LLDPDU.
    #[test]
    fn mutated_real_frames_round_trip(
        which in 0usize..2,
        edits in proptest::collection::vec((any::<proptest::sample::Index>(), any::<u8>()), 1..6),
    ) {
        let mut frame = vector(["switch_to_host.bin", "switch_to_switch.bin"][which]);
        for (at, byte) in edits {
            let i = at.index(frame.len());
            frame[i] = byte;
        }
        if let Ok((_, repr)) = lldp::parse_frame(&frame) {
            let mut buf = vec![0u8; 14 + repr.buffer_len()];
            let n = lldp::emit_frame(Address([2, 0, 0, 0, 0, 1]), &repr, &mut buf).unwrap();
            let (_, back) = lldp::parse_frame(&buf[..n]).unwrap();
            prop_assert_eq!(back, repr);
        }
    }

    #[test]
    fn parse_emit_round_trips(
        chassis in proptest::collection::vec(any::<u8>(), 1..255),
        port in proptest::collection::vec(any::<u8>(), 1..255),
        name in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..255)),
        ttl in any::<u16>(),
    ) {
        let repr = LldpduRepr {
            chassis_id: lldp::Id { subtype: 7, value: &chassis },
            port_id: lldp::Id { subtype: 5, value: &port },
            ttl,
            port_description: None,
            system_name: name.as_deref(),
            management_address: None,
        };
        let mut buf = vec![0u8; 1024];
        let n = lldp::emit_frame(Address([2, 0, 0, 0, 0, 9]), &repr, &mut buf).unwrap();
        let (_, back) = lldp::parse_frame(&buf[..n]).unwrap();
        prop_assert_eq!(back, repr);
    }
}
