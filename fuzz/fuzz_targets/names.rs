//! Every name and number a user types: tree names (`pipecast plan --tree`, `PIPECAST_TREE`),
//! algorithm and transport names, shared-memory modes, MAC addresses, size strings (`4M`), link
//! rates (`2.5gbit`, `lab up --rate`, `sim --link-rate`) and `PIPECAST_IFACE` specs (interface names and IPv4 subnets). Each parses or is refused with
//! a message, never a panic; what parses prints back to text that parses to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pipecast::comm::hosts::pick_ip;
use pipecast::comm::{Algorithm, ShmMode, Transport};
use pipecast::plan::TreeKind;
use pipecast::transport::ifaddrs::Ipv4Interface;
use pipecast::wire::ethernet::Address;
use std::net::Ipv4Addr;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let text = text.as_ref();
    if let Ok(tree) = text.parse::<TreeKind>() {
        assert_eq!(tree.to_string().parse::<TreeKind>().expect("a printed tree parses"), tree);
    }
    if let Ok(algorithm) = text.parse::<Algorithm>() {
        let _ = algorithm.to_string();
    }
    let _ = text.parse::<Transport>();
    let _ = text.parse::<ShmMode>();
    if let Ok(mac) = text.parse::<Address>() {
        assert_eq!(mac.to_string().parse::<Address>(), Ok(mac));
    }
    if let Some(n) = pipecast::input::parse_bytes(text) {
        assert_eq!(pipecast::input::parse_bytes(&n.to_string()), Some(n));
    }
    if let Some(bits) = pipecast::input::parse_rate(text) {
        let name = pipecast::input::rate_name(bits);
        assert_eq!(pipecast::input::parse_rate(&name), Some(bits), "{name}");
    }
    let interfaces = [
        Ipv4Interface {
            name: "lo".into(),
            addr: Ipv4Addr::LOCALHOST,
            prefix: 8,
            up: true,
            loopback: true,
        },
        Ipv4Interface {
            name: "eth0".into(),
            addr: Ipv4Addr::new(198, 18, 0, 3),
            prefix: 16,
            up: true,
            loopback: false,
        },
    ];
    let _ = pick_ip(Some(text), &interfaces);
});
