//! Agreement at communicator creation: every rank reaches the bootstrap allgather, even after
//! a local failure, and all ranks take the same decision from the same blobs (DESIGN.md,
//! "Agreement"). A rank that failed alone and fell back to the MPI's own broadcast while the
//! others waited in pipecast's allgather hung the job; now it reports its failure in its blob
//! (`wire::bootstrap`) and every rank returns the same error.

use super::{Algorithm, CommError, Config};
use crate::wire::bootstrap::{Repr, Status};
use std::fmt::Write;
use std::net::SocketAddr;

/// What a rank's failure is, for the C API's result code (carried in the blob so that every
/// rank reports the same class).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ErrorClass {
    Config = 3,
    Bootstrap = 4,
    Transport = 5,
    Timeout = 6,
    Mismatch = 7,
    Unsupported = 8,
    Other = 10,
}

impl ErrorClass {
    pub fn from_u8(v: u8) -> ErrorClass {
        match v {
            3 => ErrorClass::Config,
            4 => ErrorClass::Bootstrap,
            5 => ErrorClass::Transport,
            6 => ErrorClass::Timeout,
            7 => ErrorClass::Mismatch,
            8 => ErrorClass::Unsupported,
            _ => ErrorClass::Other,
        }
    }

    /// The class of any crate error.
    pub fn of(e: &crate::Error) -> ErrorClass {
        use crate::engine::EngineError;
        use crate::transport::TransportError;
        use crate::Error;
        match e {
            Error::Engine(EngineError::Timeout { .. }) => ErrorClass::Timeout,
            Error::Engine(EngineError::Mismatch { .. }) => ErrorClass::Mismatch,
            Error::Transport(TransportError::ConnectTimeout { .. }) => ErrorClass::Timeout,
            Error::Transport(_) => ErrorClass::Transport,
            Error::Comm(CommError::Agreement { class, .. }) => *class,
            Error::Comm(CommError::Bootstrap(_)) => ErrorClass::Bootstrap,
            Error::Comm(
                CommError::Env { .. }
                | CommError::TopologyHosts { .. }
                | CommError::TopologySize { .. },
            ) => ErrorClass::Config,
            Error::Topology(_) | Error::Plan(_) | Error::Model(_) => ErrorClass::Config,
            _ => ErrorClass::Other,
        }
    }
}

/// The text of every setting that must be equal at every rank: what decides the plans and
/// the link. Profiles and topologies are compared by digest.
pub fn settings_text(config: &Config) -> String {
    let mut s = String::new();
    let algorithm = match &config.algorithm {
        Algorithm::Tree(t) => t.to_string(),
        other => other.to_string(),
    };
    // Whether ranks name their machines (PIPECAST_MACHINE) or go by their kernels' host
    // names: a mix would match some ranks to a topology's machines by one and some by the
    // other. The names themselves differ by rank; each rank's travels in its blob.
    write!(
        s,
        "tree={algorithm} segment={} window={} transport={} shm={} host_min_bytes={} io_uring={} machine={}",
        config.segment.map_or("model".into(), |v| v.to_string()),
        config.engine.window,
        transport_kind(&config.transport),
        config.shm,
        config
            .host_min_bytes
            .map_or("default".into(), |b| b.to_string()),
        u8::from(config.io_uring),
        if config.machine.is_some() {
            "named"
        } else {
            "host"
        },
    )
    .ok();
    // Raw Ethernet frames of another version are dropped unread (wire/frame.rs): ranks whose
    // builds disagree on it must fail here, not time out in their first broadcast.
    if matches!(
        config.transport,
        super::Transport::RawEth { .. } | super::Transport::Auto
    ) {
        write!(s, " raweth_frame={}", crate::wire::frame::VERSION).ok();
    }
    // A rank with another queue pair bound would size its completion queue and close edges
    // differently: agreed on whenever verbs may run, so it fails here, at every rank.
    if matches!(
        config.transport,
        super::Transport::Verbs | super::Transport::Auto
    ) {
        write!(s, " verbs_max_qps={}", config.verbs_max_qps).ok();
    }
    // A rank that keeps fewer connections closes and reopens them at other moments; agreed,
    // like every other setting that shapes the ranks' behaviour together.
    write!(s, " max_connections={}", config.max_connections).ok();
    write!(s, " given={}", config.max_connections_given).ok();
    // Every rank opens the multicast carrier and probes the group, or none does.
    write!(s, " multicast={}", config.multicast).ok();
    // Debug output of these Vec-based values is deterministic. A profile not given is
    // derived after the agreement from what every rank measured (`network::agreed`).
    if config.profile_given {
        let profile = format!("{:?}", config.profile);
        write!(s, " profile={:016x}", fnv1a(profile.as_bytes())).ok();
    } else {
        s.push_str(" profile=derived");
    }
    if let Some(t) = &config.topology {
        let text = format!("{t:?}");
        write!(s, " topology={:016x}", fnv1a(text.as_bytes())).ok();
    }
    s
}

/// The transport without a per-rank interface name (ranks may use different interfaces).
fn transport_kind(t: &super::Transport) -> &'static str {
    match t {
        super::Transport::Tcp => "tcp",
        super::Transport::RawEth { .. } => "raweth",
        super::Transport::Verbs => "verbs",
        super::Transport::Auto => "auto",
    }
}

/// FNV-1a, 64 bits: a digest that is the same in every process and build.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The job's roster: every rank's addresses, host, CPUs and link as its bootstrap blob gave
/// them, once every rank said it is ready and all agree (not `engine::reliable::Peers`, the
/// reliability of a lossy link).
#[derive(Debug, Clone)]
pub struct Roster {
    pub addrs: Vec<SocketAddr>,
    pub macs: Vec<Option<[u8; 6]>>,
    pub hosts: Vec<String>,
    /// Each rank's RDMA verbs endpoint, when it opened one.
    pub verbs: Vec<Option<crate::wire::bootstrap::VerbsAddr>>,
    /// Each rank's NICs beyond the first (rails 1, 2, …): where it listens on each.
    pub rails: Vec<Vec<SocketAddr>>,
    /// Each rank's NICs beyond the first: the MAC of the raw socket it opened on each (`None`
    /// where it opened none).
    pub rail_macs: Vec<Vec<Option<[u8; 6]>>>,
    /// The CPUs each rank may run on, when it said ([`super::cpus`]).
    pub cpus: Vec<Option<crate::wire::bootstrap::CpuRange>>,
    /// What each rank knows of its data link (`comm::network`).
    pub links: Vec<Option<crate::wire::bootstrap::LinkSeen>>,
    /// Rank 0's cookie: the job's.
    pub cookie: u64,
}

/// Reads everybody's blobs: the same answer at every rank, since every rank reads the same
/// blobs. An error lists every failed rank and its reason.
pub fn decide(blobs: &[Vec<u8>]) -> Result<Roster, CommError> {
    let mut parsed = Vec::with_capacity(blobs.len());
    for (r, b) in blobs.iter().enumerate() {
        parsed.push(Repr::parse(b).map_err(|e| CommError::Agreement {
            class: ErrorClass::Bootstrap,
            detail: format!("rank {r} sent an unreadable bootstrap blob ({e}): is every rank running the same pipecast version?"),
        })?);
    }
    let failed: Vec<(usize, &Repr)> = parsed
        .iter()
        .enumerate()
        .filter(|(_, p)| p.status == Status::Failed)
        .collect();
    if let Some((_, first)) = failed.first() {
        let detail = failed
            .iter()
            .map(|(r, p)| format!("rank {r}: {}", p.reason))
            .collect::<Vec<_>>()
            .join("; ");
        return Err(CommError::Agreement {
            class: ErrorClass::from_u8(first.code),
            detail,
        });
    }
    if let Some(r) = parsed.iter().position(|p| p.settings != parsed[0].settings) {
        return Err(CommError::Agreement {
            class: ErrorClass::Config,
            detail: format!(
                "ranks disagree on their settings: rank 0 has {:?}, rank {r} has {:?}; give every rank the same PIPECAST_* settings (or MCA parameters)",
                parsed[0].settings, parsed[r].settings
            ),
        });
    }
    Ok(Roster {
        addrs: parsed.iter().map(|p| p.addr).collect(),
        macs: parsed.iter().map(|p| p.mac).collect(),
        hosts: parsed.iter().map(|p| p.host.to_string()).collect(),
        verbs: parsed.iter().map(|p| p.verbs.clone()).collect(),
        rails: parsed
            .iter()
            .map(|p| p.rails.iter().map(|n| n.addr).collect())
            .collect(),
        rail_macs: parsed
            .iter()
            .map(|p| p.rails.iter().map(|n| n.mac).collect())
            .collect(),
        cpus: parsed.iter().map(|p| p.cpus).collect(),
        links: parsed.iter().map(|p| p.link).collect(),
        cookie: parsed.first().map_or(0, |p| p.cookie),
    })
}

/// The blob of a rank whose local setup failed.
pub fn failed_blob(e: &crate::Error, host: &str) -> Vec<u8> {
    let reason = e.to_string();
    Repr {
        status: Status::Failed,
        code: ErrorClass::of(e) as u8,
        cookie: 0,
        addr: SocketAddr::from(([0, 0, 0, 0], 0)),
        mac: None,
        host: truncate(host),
        settings: "",
        reason: truncate(&reason),
        verbs: None,
        rails: crate::wire::bootstrap::RailNics::default(),
        cpus: None,
        link: None,
    }
    .to_vec()
    .expect("lengths are bounded")
}

/// `s` cut to the blob's string limit (on a character boundary).
pub fn truncate(s: &str) -> &str {
    let mut end = s.len().min(crate::wire::bootstrap::MAX_TEXT);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The second round: every rank says whether it finished its setup (`reason` empty) or not.
pub fn ready_blob(problem: Option<&crate::Error>) -> Vec<u8> {
    match problem {
        None => vec![0],
        Some(e) => {
            let mut v = vec![ErrorClass::of(e) as u8];
            v.extend_from_slice(truncate(&e.to_string()).as_bytes());
            v
        }
    }
}

/// Reads the second round: `Ok` when every rank is ready.
pub fn all_ready(blobs: &[Vec<u8>]) -> Result<(), CommError> {
    let failed: Vec<(usize, &Vec<u8>)> = blobs
        .iter()
        .enumerate()
        .filter(|(_, b)| b.first() != Some(&0))
        .collect();
    let Some((_, first)) = failed.first() else {
        return Ok(());
    };
    Err(CommError::Agreement {
        class: ErrorClass::from_u8(first.first().copied().unwrap_or(10)),
        detail: failed
            .iter()
            .map(|(r, b)| {
                format!(
                    "rank {r}: {}",
                    String::from_utf8_lossy(b.get(1..).unwrap_or_default())
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(settings: &str, port: u16) -> Vec<u8> {
        Repr {
            status: Status::Ready,
            code: 0,
            cookie: u64::from(port),
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            mac: None,
            host: "h",
            settings,
            reason: "",
            verbs: None,
            rails: crate::wire::bootstrap::RailNics::default(),
            cpus: None,
            link: None,
        }
        .to_vec()
        .unwrap()
    }

    /// `err` is the agreement failure of a setting (class `Config`, alike at every rank).
    fn assert_config_failure(err: &CommError) {
        assert!(
            matches!(
                err,
                CommError::Agreement {
                    class: ErrorClass::Config,
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn every_rank_ready_and_agreeing_gives_the_peers() {
        let p = decide(&[ready("a", 1), ready("a", 2)]).unwrap();
        assert_eq!(p.cookie, 1);
        assert_eq!(p.addrs[1].port(), 2);
    }

    #[test]
    fn a_failed_rank_fails_everybody_with_its_reason() {
        let e: crate::Error = CommError::Env {
            name: "PIPECAST_IFACE",
            problem: "no interface matches \"nosuch0\"".into(),
        }
        .into();
        let blobs = [ready("a", 1), failed_blob(&e, "h"), ready("a", 3)];
        let err = decide(&blobs).unwrap_err();
        assert_config_failure(&err);
        let text = err.to_string();
        assert!(
            text.contains("rank 1: environment variable PIPECAST_IFACE"),
            "{text}"
        );
    }

    /// The raw Ethernet frame version is agreed on whenever raw Ethernet may run, so that
    /// ranks of builds with different frame formats fail at creation.
    #[test]
    fn the_raw_ethernet_frame_version_is_part_of_the_settings() {
        let want = format!(" raweth_frame={}", crate::wire::frame::VERSION);
        for (transport, has) in [
            (super::super::Transport::Tcp, false),
            (super::super::Transport::RawEth { iface: None }, true),
            (super::super::Transport::Auto, true),
        ] {
            let config = Config {
                transport,
                ..Config::default()
            };
            assert_eq!(settings_text(&config).contains(&want), has);
        }
    }

    /// The verbs link's queue pair bound is agreed on whenever verbs may run: a rank with
    /// another one fails every rank at creation (never a hang in a broadcast).
    #[test]
    fn the_verbs_queue_pair_bound_is_part_of_the_settings() {
        for (transport, has) in [
            (super::super::Transport::Tcp, false),
            (super::super::Transport::RawEth { iface: None }, false),
            (super::super::Transport::Verbs, true),
            (super::super::Transport::Auto, true),
        ] {
            let text = |max_qps| {
                settings_text(&Config {
                    transport: transport.clone(),
                    verbs_max_qps: max_qps,
                    ..Config::default()
                })
            };
            assert_eq!(text(64).contains(" verbs_max_qps=64"), has);
            assert_eq!(text(64) != text(8), has, "{transport}");
            if has {
                let err = decide(&[ready(&text(64), 1), ready(&text(8), 2)]).unwrap_err();
                assert!(err.to_string().contains("verbs_max_qps=8"), "{err}");
            }
        }
    }

    /// Whether TCP runs through io_uring, and whether ranks name their machines, are agreed:
    /// ranks that differ fail together, naming both texts (issue 29).
    #[test]
    fn io_uring_and_machine_naming_are_part_of_the_settings() {
        let text = |io_uring, machine: Option<&str>| {
            settings_text(&Config {
                io_uring,
                machine: machine.map(Into::into),
                ..Config::default()
            })
        };
        assert!(text(true, None).contains(" io_uring=1 machine=host"));
        assert!(text(false, Some("a")).contains(" io_uring=0 machine=named"));
        // Different names are the rule (one per machine), not a disagreement.
        assert_eq!(text(true, Some("a")), text(true, Some("b")));
        for (a, b) in [
            (text(true, None), text(false, None)),
            (text(true, Some("a")), text(true, None)),
        ] {
            let err = decide(&[ready(&a, 1), ready(&b, 2)]).unwrap_err();
            assert_config_failure(&err);
            assert!(
                err.to_string().contains("disagree on their settings"),
                "{err}"
            );
        }
    }

    #[test]
    fn different_settings_fail_everybody() {
        let err = decide(&[ready("tree=linear", 1), ready("tree=binary", 2)]).unwrap_err();
        assert!(
            err.to_string().contains("rank 1 has \"tree=binary\""),
            "{err}"
        );
    }

    #[test]
    fn second_round() {
        assert!(all_ready(&[ready_blob(None), ready_blob(None)]).is_ok());
        let e: crate::Error = CommError::Bootstrap("no thread".into()).into();
        let err = all_ready(&[ready_blob(None), ready_blob(Some(&e))]).unwrap_err();
        assert!(
            err.to_string().contains("rank 1: bootstrap: no thread"),
            "{err}"
        );
    }
}
