//! The seed corpora of the fuzz targets (`fuzz/seeds/TARGET/`, which `bench/fuzz.sh` hands to
//! each target with its working corpus): valid inputs, the binary ones made by the library's
//! own encoders, so that the fuzzer starts past the magic numbers, versions and checksums that
//! random bytes almost never pass (libFuzzer without a sanitizer does not trace the slice
//! comparisons that check them; issue 29). Each seed must pass its target's checks here, and
//! the committed files must be what the encoders make now: a format change shows as a failure
//! of this test, and `PIPECAST_FUZZ_SEEDS=write cargo test --test fuzz_seeds` writes them anew.
//! Targets fed by the repository's own files (`files`, `lldp`) get them from `bench/fuzz.sh`.

use pipecast::engine::{DataHeader, Message};
use pipecast::wire::frame::{Frame, Kind, Repr as FrameRepr, HEADER_LEN};
use pipecast::wire::{bootstrap, hello, joining, shm};
use std::collections::BTreeMap;
use std::path::Path;

/// Seeds of one target: file name → bytes.
type Seeds = BTreeMap<&'static str, Vec<u8>>;

/// The fuzz targets with generated seeds, and their seeds.
fn all() -> BTreeMap<&'static str, Seeds> {
    BTreeMap::from([
        ("bootstrap", bootstrap()),
        ("config", config()),
        ("frame", frame()),
        ("lab_state", lab_state()),
        ("lldpd_json", lldpd_json()),
        ("mcast_frame", mcast_frame()),
        ("names", names()),
        ("raweth_rx", raweth_rx()),
        ("shm_record", shm_record()),
        ("tcp_frame", tcp_frame()),
        ("topo_import", topo_import()),
    ])
}

fn bootstrap() -> Seeds {
    let ready = bootstrap::Repr {
        status: bootstrap::Status::Ready,
        code: 0,
        cookie: 0x0123_4567_89ab_cdef,
        addr: "198.18.0.7:40123".parse().unwrap(),
        mac: Some([2, 0, 0, 0, 0, 7]),
        host: "n7",
        settings: "PIPECAST_TREE=auto;PIPECAST_WINDOW=16",
        reason: "",
        rails: bootstrap::RailNics::default(),
        verbs: None,
        cpus: Some(bootstrap::CpuRange { first: 4, count: 2 }),
        link: None,
    };
    let rails = bootstrap::RailNics::new(&[
        bootstrap::NicAddr {
            addr: "10.1.0.7:40124".parse().unwrap(),
            mac: Some([2, 0, 0, 1, 0, 7]),
        },
        bootstrap::NicAddr {
            addr: "[fd00::7]:40125".parse().unwrap(),
            mac: None,
        },
    ])
    .unwrap();
    let full = bootstrap::Repr {
        rails,
        verbs: Some(bootstrap::VerbsAddr {
            port: 1,
            gid_index: 3,
            lid: 0,
            gid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0xff, 0xfe, 0, 0, 7],
            mtu: 3,
            listen: "10.1.2.3:45678".parse().unwrap(),
            ring_slot: 32768,
            ring_slots: 4,
        }),
        link: Some(bootstrap::LinkSeen {
            rate_mbps: 10_000,
            segment_ns: 12_345,
            host_mb_s: 2_500,
        }),
        ..ready.clone()
    };
    let failed = bootstrap::Repr {
        status: bootstrap::Status::Failed,
        code: 3,
        addr: "[::1]:5000".parse().unwrap(),
        mac: None,
        reason: "PIPECAST_IFACE=eth9: no such interface",
        cpus: None,
        ..ready.clone()
    };
    let joins = joining::Repr {
        status: joining::Status::Engine,
        id: 0x8000_0007,
        identity: (0x0123_4567_89ab_cdef, 3),
        addr: Some("198.18.0.7:40123".parse().unwrap()),
        cpus: Some(bootstrap::CpuRange { first: 4, count: 2 }),
        engines: 1,
        host: "n7",
        settings: "PIPECAST_TREE=auto;PIPECAST_WINDOW=16",
        reason: "",
    };
    let cannot = joining::Repr {
        status: joining::Status::NoEngine,
        addr: Some("[fd00::7]:40125".parse().unwrap()),
        cpus: None,
        engines: 2,
        reason: "raweth: the link cannot add peers",
        ..joins.clone()
    };
    BTreeMap::from([
        ("join_engine", joins.to_vec().unwrap()),
        ("join_no_engine", cannot.to_vec().unwrap()),
        ("blob_ready", ready.to_vec().unwrap()),
        ("blob_full", full.to_vec().unwrap()),
        ("blob_failed", failed.to_vec().unwrap()),
        (
            "hello_rendezvous",
            hello::emit(hello::RENDEZVOUS, 0x5eed, 3).to_vec(),
        ),
        (
            "hello_tcp",
            hello::emit(hello::TCP_LINK, 0x5eed, 1).to_vec(),
        ),
    ])
}

/// The `config` target's input: transport, tree and interface, 16 bytes of numbers (segment
/// and timeout, little-endian), and settings text, split by 0xff.
fn config() -> Seeds {
    let input = |fields: [&str; 3], segment: u64, timeout: u64, settings: &str| {
        let mut v = Vec::new();
        for f in fields {
            v.extend_from_slice(f.as_bytes());
            v.push(0xff);
        }
        v.extend_from_slice(&segment.to_le_bytes());
        v.extend_from_slice(&timeout.to_le_bytes());
        v.push(0xff);
        v.extend_from_slice(settings.as_bytes());
        v
    };
    BTreeMap::from([
        (
            "tcp_linear",
            input(
                ["tcp", "linear", "lo"],
                65536,
                5000,
                "PIPECAST_TREE=binary\nPIPECAST_SEGMENT=64K\nPIPECAST_TIMEOUT_MS=5000",
            ),
        ),
        (
            "auto",
            input(
                ["auto", "auto", "eth0,198.18.0.0/16"],
                0,
                0,
                "PIPECAST_TRANSPORT=auto;PIPECAST_SHM=ring;PIPECAST_WINDOW=8;PIPECAST_LINK_RATE=10gbit",
            ),
        ),
        (
            "raweth",
            input(
                ["raweth", "kbinomial:2", "eth0"],
                8908,
                20000,
                "PIPECAST_HOST_MIN_BYTES=0;PIPECAST_POLL_US=50;PIPECAST_RAWETH_RING=4M",
            ),
        ),
    ])
}

/// A raw Ethernet frame header of `kind` (and `len` payload bytes of 0xab), sealed from
/// rank 0's MAC to rank 1's.
fn raweth_frame(kind: Kind, index: u32, peer_seq: u64, len: u16) -> Vec<u8> {
    let repr = FrameRepr {
        kind: kind.into(),
        flags: 0,
        lane: 0,
        lanes: 1,
        cookie: 0x5eed_c0de,
        comm: 0,
        root: 0,
        bcast_seq: 1,
        msize: 5000,
        segment: 1000,
        index,
        offset: 0,
        segment_len: 1000,
        payload_len: len,
        credit: 64,
        peer_seq,
        ack: peer_seq.saturating_sub(1),
        sack: 0,
        from: 0,
        to: 1,
    };
    let mut b = vec![0xab; repr.buffer_len()];
    let mut f = Frame::new_unchecked(&mut b[..]);
    repr.emit(&mut f);
    f.seal(&[2, 0, 0, 0, 0, 2], &[2, 0, 0, 0, 0, 1]);
    b
}

fn frame() -> Seeds {
    BTreeMap::from([
        ("data", raweth_frame(Kind::Data, 2, 3, 1000)),
        ("ack", raweth_frame(Kind::Ack, 0, 0, 0)),
        ("credit", raweth_frame(Kind::Credit, 0, 4, 0)),
        ("done", raweth_frame(Kind::Done, 0, 5, 0)),
        ("nop", raweth_frame(Kind::Nop, 0, 6, 0)),
    ])
}

fn lab_state() -> Seeds {
    let state = serde_json::json!({
        "name": "t",
        "run_dir": "/run/pipecast/lab/t",
        "rate_bits": 100_000_000u64,
        "mtu": 1500,
        "mgmt_netns": "t-mg",
        "switches": [{"name": "s0", "netns": "t-s0", "lldp_socket": "/run/pipecast/lab/t/s0.sock"}],
        "machines": [
            {"name": "h0", "netns": "t-h0", "switch": "s0", "address": "198.18.0.1",
             "mgmt_address": "198.19.0.1"},
            {"name": "h1", "netns": "t-h1", "switch": "s0", "address": "198.18.0.2",
             "mgmt_address": "198.19.0.2",
             "rails": [{"switch": "r1", "address": "10.1.0.2"}]}
        ],
        "topology": {"switches": ["s0"], "machines": [{"name": "h0", "switch": "s0"},
                                                      {"name": "h1", "switch": "s0", "ranks": 2}]},
        "complete": true,
        "owner": {"kind": "user_namespace", "keeper": 4242, "started": 123456}
    });
    // Through the real type: what the lab writes.
    let state: pipecast::lab::LabState = serde_json::from_value(state).unwrap();
    let root = pipecast::lab::LabState {
        owner: Default::default(),
        ..state.clone()
    };
    BTreeMap::from([
        ("rootless", serde_json::to_vec_pretty(&state).unwrap()),
        ("root", serde_json::to_vec(&root).unwrap()),
    ])
}

/// Every kind of multicast frame, sealed, from rank 0 to rank 1 or the group (data frames in
/// their 32-byte layout, with a whole and a header-only checksum); the first byte is the
/// target's control byte (0: rank 0's source, the checksum as it is).
fn mcast_frame() -> Seeds {
    use pipecast::wire::mcast::{
        cookie_tag, flags, ident_check, Data, Header, Kind as McKind, Repr as McRepr, GROUP,
    };
    const COOKIE: u64 = 0x3232_c0de;
    let seal = |header: Header, payload: &[u8]| {
        let mut b = vec![0u8];
        b.extend_from_slice(&header.to_bytes(payload).unwrap());
        b.extend_from_slice(payload);
        b
    };
    let control = |kind, to| {
        let repr = McRepr {
            kind,
            from: 0,
            cookie: COOKIE,
            bseq: 5,
            msize: 3000,
            segment: 1000,
            index: 2,
            count: 3,
            root: 0,
            value: 2,
            to,
            ..McRepr::default()
        };
        seal(Header::Control(repr), &[])
    };
    let payload = pipecast::testing::pattern(1000, 3);
    let data = |flags| {
        let d = Data {
            flags,
            from: 0,
            tag: cookie_tag(COOKIE),
            bseq: 5,
            index: 2,
            count: payload.len() as u16,
            check: ident_check(0, 3000, 1000),
        };
        seal(Header::Data(d), &payload)
    };
    BTreeMap::from([
        ("data", data(0)),
        (
            "data_repair_header_sum",
            data(flags::REPAIR | flags::HEADER_SUM),
        ),
        ("nack", control(McKind::Nack, 1)),
        ("ack", control(McKind::Ack, 1)),
        ("sync", control(McKind::Sync, GROUP)),
        ("probe", control(McKind::Probe, GROUP)),
        ("abort", control(McKind::Abort, GROUP)),
    ])
}

fn lldpd_json() -> Seeds {
    // Trimmed from a real `lldpcli -f json0 show neighbors` of switch s0 in the lab (the unit
    // tests of `topology::lldpd` read it from the seed).
    let neighbours = r#"{"lldp": [{"interface": [
      {"name": "s1", "via": "LLDP", "rid": "1", "age": "0 day, 00:00:02",
       "chassis": [{"id": [{"type": "local", "value": "s1"}], "name": [{"value": "s1"}],
                    "capability": [{"type": "Bridge", "enabled": true}, {"type": "Router", "enabled": false}]}],
       "port": [{"id": [{"type": "ifname", "value": "s0"}], "descr": [{"value": "s0"}], "ttl": [{"value": "4"}]}]},
      {"name": "s2", "via": "LLDP",
       "chassis": [{"id": [{"type": "mac", "value": "aa:bb:cc:dd:ee:ff"}]}],
       "port": [{"id": [{"type": "ifname", "value": "s0"}]}]}
    ]}]}"#;
    BTreeMap::from([
        ("lldpcli", neighbours.as_bytes().to_vec()),
        (
            "topology.conf",
            b"SwitchName=s0 Switches=s[1-2]\nSwitchName=s1 Nodes=n[0-3]\nSwitchName=s2 Nodes=n[4-7],m01\n"
                .to_vec(),
        ),
        ("hostlist", b"n[0-3,7],gpu[01-02]x,m1".to_vec()),
    ])
}

fn names() -> Seeds {
    [
        ("tree_linear", "linear"),
        ("tree_kary", "kary:3"),
        ("tree_kbinomial", "kbinomial:2"),
        ("tree_hetero", "hetero:prune-degree"),
        ("auto", "auto"),
        ("transport_tcp", "tcp"),
        ("transport_raweth", "raweth:eth0"),
        ("mac", "02:00:00:00:00:01"),
        ("size", "64KiB"),
        ("size_m", "4M"),
        ("rate", "2.5gbit"),
        ("iface", "eth0,198.18.0.0/16"),
    ]
    .into_iter()
    .map(|(name, text)| (name, text.as_bytes().to_vec()))
    .collect()
}

/// The `raweth_rx` target's input: 4 bytes choosing the posted broadcast (message size
/// `u16 × 7 + (byte 2 & 7)`, segment size from byte 3, bit 7 two lanes), then records of
/// `control u8, length u16 LE, frame bytes` (control 0x18: from rank 0, sealed and aimed at the
/// posted broadcast; 0x09: from rank 2, sealed).
fn raweth_rx() -> Seeds {
    let head = |msize: u64, two_lanes: bool| {
        let (q, r) = (msize / 7, msize % 7);
        let q = u16::try_from(q).unwrap().to_le_bytes();
        // Segment 1000 bytes: byte 3 % 5 == 0.
        vec![q[0], q[1], r as u8, if two_lanes { 0x80 } else { 0 }]
    };
    let record = |v: &mut Vec<u8>, control: u8, frame: &[u8]| {
        v.push(control);
        v.extend_from_slice(&u16::try_from(frame.len()).unwrap().to_le_bytes());
        v.extend_from_slice(frame);
    };
    // The whole of a 5000-byte broadcast from rank 0 in five segments, and rank 2's ack.
    let mut whole = head(5000, false);
    for i in 0..5u32 {
        record(
            &mut whole,
            0x18,
            &raweth_frame(Kind::Data, i, u64::from(i) + 1, 1000),
        );
    }
    record(&mut whole, 0x09, &raweth_frame(Kind::Ack, 0, 0, 0));
    // One 112-byte segment, then the same again (a duplicate), over two lanes.
    let mut one = head(112, true);
    let mut seg = raweth_frame(Kind::Data, 0, 1, 112);
    Frame::new_unchecked(&mut seg[..]).set_segment_len(112);
    record(&mut one, 0x18, &seg);
    record(&mut one, 0x18, &seg);
    BTreeMap::from([("whole_broadcast", whole), ("one_segment_twice", one)])
}

fn shm_record() -> Seeds {
    let head = pipecast::wire::message::emit(&Message::Data(data_header()));
    [
        (
            "hello",
            shm::Record::Hello {
                cookie: 0x5eed,
                rank: 3,
                probe_addr: 0x7fff_0000_1000,
                probe: *b"pipecast probe!!",
            },
        ),
        ("mode_cma", shm::Record::Mode(shm::Mode::Cma)),
        ("mode_ring", shm::Record::Mode(shm::Mode::Ring)),
        ("ring_fd", shm::Record::RingFd { size: 4 << 20 }),
        (
            "message",
            shm::Record::Message {
                head,
                addr: 0x7f00_0000_0000,
            },
        ),
        (
            "ring_chunk",
            shm::Record::RingChunk {
                head,
                pos: 3 << 20,
                at: 4096,
                len: 61440,
            },
        ),
        ("ring_freed", shm::Record::RingFreed { chunks: 17 }),
    ]
    .into_iter()
    .map(|(name, r)| (name, r.encode().to_vec()))
    .collect()
}

fn data_header() -> DataHeader {
    DataHeader {
        seq: 7,
        root: 2,
        msize: 1 << 20,
        segment: 65536,
        lanes: 2,
        lane: 1,
        index: 3,
        len: 65536,
    }
}

fn tcp_frame() -> Seeds {
    use pipecast::wire::message::emit as encode;
    BTreeMap::from([
        ("data", encode(&Message::Data(data_header())).to_vec()),
        // A peer announcing a 2^60-byte message (transport::limits::announced refuses it).
        (
            "data-2e60",
            encode(&Message::Data(pipecast::engine::DataHeader {
                msize: 1 << 60,
                segment: u32::MAX,
                len: u32::MAX,
                ..data_header()
            }))
            .to_vec(),
        ),
        (
            "credit",
            encode(&Message::Credit {
                seq: 7,
                lane: 1,
                consumed: 4,
            })
            .to_vec(),
        ),
        ("done", encode(&Message::Done { seq: 7, lane: 0 }).to_vec()),
    ])
}

fn topo_import() -> Seeds {
    BTreeMap::from([
        (
            "coords",
            b"# rank: group id, switch id, port number\n0: 1 7 -1\n1: 1 10 -1\n2: 2 3 5\n3: 2 3 5\n"
                .to_vec(),
        ),
        (
            "topology.conf",
            b"SwitchName=s0 Switches=s[1-2]\nSwitchName=s1 Nodes=n[0-3]\nSwitchName=s2 Nodes=n[4-7]\n"
                .to_vec(),
        ),
    ])
}

/// Whether `seed` passes the checks of `target` (what the target parses first).
fn passes(target: &str, seed: &[u8]) -> bool {
    let text = || std::str::from_utf8(seed).unwrap();
    match target {
        "bootstrap" => {
            bootstrap::Repr::parse(seed).is_ok()
                || joining::Repr::parse(seed).is_ok()
                || hello::parse(hello::RENDEZVOUS, seed).is_some()
                || hello::parse(hello::TCP_LINK, seed).is_some()
        }
        "config" => {
            let settings = seed.split(|&b| b == 0xff).nth(4).unwrap();
            pipecast::comm::Settings::parse_assignments(std::str::from_utf8(settings).unwrap())
                .is_ok_and(|s| s.apply(&mut pipecast::comm::Config::default()).is_ok())
        }
        "frame" => Frame::new_checked(seed).is_ok_and(|f| {
            FrameRepr::parse(&f).is_ok() && f.checksum_ok(&[2, 0, 0, 0, 0, 2], &[2, 0, 0, 0, 0, 1])
        }),
        "mcast_frame" => {
            pipecast::wire::mcast::Frame::new_checked(&seed[1..]).is_ok_and(|f| f.checksum_ok())
        }
        "lab_state" => serde_json::from_slice::<pipecast::lab::LabState>(seed).is_ok(),
        "lldpd_json" => {
            pipecast::topology::lldpd::parse_neighbors(text()).is_ok_and(|n| !n.is_empty())
                || pipecast::topology::slurm::parse_slurm_topology(text()).is_ok()
                    && text().contains("SwitchName")
                || pipecast::topology::slurm::expand_hostlist(text()).is_ok()
        }
        "names" => {
            let t = text();
            t.parse::<pipecast::plan::TreeKind>().is_ok()
                || t.parse::<pipecast::comm::Transport>().is_ok()
                || t.parse::<pipecast::wire::ethernet::Address>().is_ok()
                || pipecast::input::parse_bytes(t).is_some()
                || pipecast::input::parse_rate(t).is_some()
                || t.contains(',')
        }
        "raweth_rx" => {
            // Every record a whole frame of the right version (sealed again by the target).
            let mut rest = &seed[4..];
            while let Some((&[_, lo, hi], tail)) = rest.split_first_chunk::<3>() {
                let len = usize::from(u16::from_le_bytes([lo, hi]));
                let Some(frame) = tail.get(..len) else {
                    return false;
                };
                if !Frame::new_checked(frame).is_ok_and(|f| FrameRepr::parse(&f).is_ok()) {
                    return false;
                }
                rest = &tail[len..];
            }
            rest.is_empty() && seed.len() > HEADER_LEN
        }
        "shm_record" => shm::Record::decode(seed).is_ok(),
        "tcp_frame" => {
            seed.len() == pipecast::wire::message::HEADER
                && pipecast::wire::message::parse(seed).is_ok()
        }
        "topo_import" => {
            pipecast::topology::mpich_coords::import_mpich_coords(text()).is_ok()
                || pipecast::topology::slurm::parse_slurm_topology(text())
                    .is_ok_and(|c| c.to_topology().is_ok())
        }
        _ => panic!("no check for target {target}"),
    }
}

#[test]
fn every_seed_passes_its_targets_checks() {
    for (target, seeds) in all() {
        assert!(!seeds.is_empty(), "{target}");
        for (name, seed) in seeds {
            assert!(
                passes(target, &seed),
                "fuzz seed {target}/{name} fails its checks"
            );
        }
    }
}

#[test]
fn every_target_has_seeds() {
    let toml =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/Cargo.toml")).unwrap();
    let seeded = all();
    for target in toml
        .lines()
        .filter_map(|l| l.strip_prefix("name = \""))
        .filter_map(|l| l.strip_suffix('"'))
        .filter(|n| *n != "pipecast-fuzz")
    {
        // `files` and `lldp` are seeded by bench/fuzz.sh from the repository's own files.
        assert!(
            seeded.contains_key(target) || ["files", "lldp"].contains(&target),
            "fuzz target {target} has no seeds: add them to tests/fuzz_seeds.rs"
        );
    }
}

/// The committed seeds are what the encoders make now (`PIPECAST_FUZZ_SEEDS=write` writes
/// them).
#[test]
fn the_committed_seeds_are_current() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds");
    let write = std::env::var("PIPECAST_FUZZ_SEEDS").is_ok_and(|v| v == "write");
    for (target, seeds) in all() {
        let dir = root.join(target);
        if write {
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            for (name, seed) in &seeds {
                std::fs::write(dir.join(name), seed).unwrap();
            }
        }
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        on_disk.sort();
        let want: Vec<String> = seeds.keys().map(|k| k.to_string()).collect();
        let hint = "write them with `PIPECAST_FUZZ_SEEDS=write cargo test --test fuzz_seeds`";
        assert_eq!(on_disk, want, "fuzz/seeds/{target}: {hint}");
        for (name, seed) in seeds {
            let file = std::fs::read(dir.join(name)).unwrap();
            assert!(
                file == seed,
                "fuzz/seeds/{target}/{name} is not what the encoder makes now: {hint}"
            );
        }
    }
}
