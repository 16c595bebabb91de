//! The communicator's choice of transport (TCP, raw Ethernet or RDMA verbs), what each rank
//! publishes about it in the bootstrap, and [`BoxedLink`]: the link, boxed, for the
//! progress thread.
//!
//! Every rank binds a TCP listener (its address goes into the bootstrap blob). With `verbs`
//! or `auto` it also opens its RDMA device and puts its port, queue pair numbers and ring in
//! the blob; with `raweth` or `auto` it opens a raw Ethernet socket and puts its MAC there
//! (on a topology with rails, one socket per NIC, each NIC's MAC in its rail entry).
//! After the allgather every rank decides the same way from the same blobs ([`choose`]):
//! verbs when every rank published a verbs endpoint (it has a usable RDMA device); else raw
//! Ethernet when every rank published a MAC (it has CAP_NET_RAW and an interface) and no two
//! ranks share one unless they are on one host and shared memory links them; otherwise
//! `auto` falls back to TCP (logging why at info level, verbose 1) and `verbs`/`raweth` fail
//! naming the ranks. A rank whose device cannot open with `verbs`
//! fails its local setup, which the agreement reports to every rank.

use super::agree::Roster;
use super::{CommError, Config};
use crate::transport::raweth::{self, socket, RawEthTransport};
use crate::transport::verbs::{self, ops::Verbs, VerbsLink};
use crate::transport::{TcpTransport, TransportError};
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// Which transport moves broadcast data.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Transport {
    /// TCP between every pair of ranks (default).
    #[default]
    Tcp,
    /// Raw Ethernet frames (EtherType 0x88B5) on `iface`, or when `None` on PIPECAST_IFACE,
    /// else the interface holding the address that reaches the rendezvous, else the first
    /// non-loopback interface with an address. Needs CAP_NET_RAW. On a topology with rails,
    /// one socket per NIC: `iface` may list them (`eth0,eth1`, NIC 0 first), else each
    /// rail's is the interface holding its PIPECAST_IFACE address ([`open_raw`]).
    RawEth { iface: Option<String> },
    /// RDMA verbs (RoCE v2 or InfiniBand): segments written straight into the children's
    /// buffers. Needs a build with the `verbs` feature and an RDMA device at every rank.
    Verbs,
    /// The first that every rank can run, decided alike everywhere (the module's rule):
    /// verbs, then raw Ethernet, then TCP.
    Auto,
}

impl FromStr for Transport {
    type Err = String;
    /// `tcp`, `raweth`, `raweth:IFACE`, `raweth:IFACE0,IFACE1` (one per rail), `verbs`,
    /// `auto`.
    fn from_str(s: &str) -> Result<Transport, String> {
        match s.trim() {
            "tcp" => Ok(Transport::Tcp),
            "auto" => Ok(Transport::Auto),
            "verbs" => Ok(Transport::Verbs),
            "raweth" => Ok(Transport::RawEth { iface: None }),
            t => match t.strip_prefix("raweth:") {
                Some(i) if !i.is_empty() => Ok(Transport::RawEth {
                    iface: Some(i.to_string()),
                }),
                _ => Err(format!(
                    "transport {t:?}: write tcp, raweth, raweth:IFACE (e.g. raweth:eth0), verbs or auto"
                )),
            },
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Transport::Tcp => f.write_str("tcp"),
            Transport::Auto => f.write_str("auto"),
            Transport::Verbs => f.write_str("verbs"),
            Transport::RawEth { iface: None } => f.write_str("raweth"),
            Transport::RawEth { iface: Some(i) } => write!(f, "raweth:{i}"),
        }
    }
}

/// The link the progress thread drives: a boxed [`Link`](crate::transport::Link) trait
/// object, so every call (`register`/`deregister` included) reaches the link inside, or the
/// [`Router`](crate::transport::router::Router) that forwards it.
pub type BoxedLink = Box<dyn crate::transport::Link>;

/// Opens the raw Ethernet side for `config.transport` (`None` for `tcp`, and for `auto` when
/// it is not possible, logging why and adding it to `why`). `ip` is the address this rank
/// listens on; `rail_ips` the address of each of its NICs on a topology with rails
/// ([`hosts::rail_ips`](super::hosts::rail_ips)). On rails it opens one socket per NIC: rail
/// r's interface is item r of `raweth:IFACE0,IFACE1,…`, else the interface holding
/// `rail_ips[r]` (so `PIPECAST_IFACE=eth0,eth1`, names or subnets, serves both links).
pub fn open_raw(
    rank: usize,
    config: &Config,
    ip: Option<IpAddr>,
    rail_ips: Option<&[std::net::Ipv4Addr]>,
    why_not: &mut Vec<String>,
) -> Result<Option<RawEthTransport>, TransportError> {
    let (iface, required) = match &config.transport {
        Transport::Tcp | Transport::Verbs => return Ok(None),
        Transport::RawEth { iface } => (iface.clone(), true),
        Transport::Auto => (None, false),
    };
    let mut fallback = |why: String| -> Result<Option<RawEthTransport>, TransportError> {
        tracing::info!(rank, "transport auto: using tcp: {why}");
        why_not.push(format!("not raweth at rank {rank}: {why}"));
        Ok(None)
    };
    let names = match raw_interfaces(rank, config, iface.as_deref(), ip, rail_ips) {
        Ok(names) => names,
        Err(why) if required => {
            return Err(TransportError::Setup {
                what: "transport raweth".into(),
                error: why,
            })
        }
        Err(why) => return fallback(why),
    };
    let raw_config = raweth::Config {
        rx_ring: config.raweth_ring,
        liveness: config.timeout.as_nanos() as u64,
        ..raweth::Config::default()
    };
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    match RawEthTransport::bind_rails(rank, &names, raw_config) {
        Ok(t) => Ok(Some(t)),
        Err(e) if !required => fallback(e.to_string()),
        Err(e) => Err(e),
    }
}

/// The interfaces raw Ethernet opens, NIC 0's first ([`open_raw`]), or why it cannot.
fn raw_interfaces(
    rank: usize,
    config: &Config,
    iface: Option<&str>,
    ip: Option<IpAddr>,
    rail_ips: Option<&[std::net::Ipv4Addr]>,
) -> Result<Vec<String>, String> {
    if !socket::has_cap_net_raw() {
        let why = "raw Ethernet needs the CAP_NET_RAW capability (run as root or `setcap cap_net_raw+ep` the binary)";
        return Err(match config.transport {
            Transport::Auto => why.into(),
            _ => format!("{why}; or use PIPECAST_TRANSPORT=tcp"),
        });
    }
    let listed = iface_list(iface);
    // PIPECAST_IFACE may list subnets for TCP; only a plain interface name names a raw one.
    let first = listed
        .first()
        .cloned()
        .or_else(|| config.iface.clone().filter(|i| !i.contains(['/', ','])))
        .or_else(|| socket::default_interface(ip))
        .ok_or("no non-loopback interface with an address: name one with raweth:IFACE or PIPECAST_IFACE")?;
    let mut names = vec![first];
    match rail_ips {
        Some(ips) => {
            for (rail, &nic) in ips.iter().enumerate().skip(1) {
                let name = listed
                    .get(rail)
                    .cloned()
                    .or_else(|| socket::interface_with(nic));
                names.push(name.ok_or_else(|| {
                    format!("no interface holds {nic}, rail {rail}'s address: name the rails' interfaces with raweth:IFACE0,IFACE1")
                })?);
            }
        }
        None if listed.len() > 1 => tracing::info!(
            rank,
            "transport raweth: {} interfaces named but the topology has no rails: using {}",
            listed.len(),
            names[0]
        ),
        None => {}
    }
    Ok(names)
}

/// The interfaces of `raweth:IFACE0,IFACE1,…` (empty for `raweth`).
pub fn iface_list(iface: Option<&str>) -> Vec<String> {
    iface
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// The verbs link of a communicator: on whichever backend this build and host have.
pub type VerbsNet = VerbsLink<Box<dyn Verbs>>;

/// Opens the verbs link for `config.transport` (`None` for `tcp` and `raweth`, and for
/// `auto` when there is no usable device, logging why and adding it to `why_not`).
pub fn open_verbs(
    rank: usize,
    size: usize,
    config: &Config,
    why_not: &mut Vec<String>,
) -> Result<Option<VerbsNet>, TransportError> {
    let required = match config.transport {
        Transport::Verbs => true,
        Transport::Auto => false,
        _ => return Ok(None),
    };
    // Queue pair handshakes listen where the TCP link does (`Local::open` set the address).
    let ip = config
        .ip
        .as_deref()
        .and_then(|ip| ip.parse().ok())
        .unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
    match verbs::open(rank, size, &config.verbs, config.verbs_max_qps, ip) {
        Ok(link) => Ok(Some(link)),
        Err(e) if required => Err(TransportError::Setup {
            what: "transport verbs".into(),
            error: format!("{e}; or use PIPECAST_TRANSPORT=tcp or auto"),
        }),
        Err(e) => {
            tracing::info!(rank, "transport auto: not verbs: {e}");
            why_not.push(format!("not verbs at rank {rank}: {e}"));
            Ok(None)
        }
    }
}

/// The links a rank opened besides TCP.
pub struct Candidates {
    pub raw: Option<RawEthTransport>,
    pub verbs: Option<VerbsNet>,
}

/// Which host each rank is on, and whether ranks of one host reach each other over shared
/// memory (then the network link carries only the traffic between hosts).
pub struct OnHosts<'a> {
    /// `host_of[rank]`: ranks with equal ids share a host.
    pub host_of: &'a [usize],
    pub shm: bool,
}

/// Picks the transport from everybody's blobs (the same choice at every rank) and gives it
/// its peers. `tcp` already has its peers. With `auto`, why a faster link was not taken is
/// added to `why_not` (the same words at every rank).
pub fn choose(
    transport: &Transport,
    tcp: TcpTransport,
    links: Candidates,
    peers: &Roster,
    hosts: &OnHosts<'_>,
    why_not: &mut Vec<String>,
) -> Result<BoxedLink, CommError> {
    let Candidates { raw, verbs } = links;
    let without: Vec<usize> = (0..peers.verbs.len())
        .filter(|&r| peers.verbs[r].is_none())
        .collect();
    match (verbs, transport) {
        (Some(mut v), _) if without.is_empty() => {
            // Every rank has the others' addresses; queue pairs are connected per tree edge
            // when first used. A failure here is local; the second agreement round fails
            // every rank with it.
            let addrs: Vec<_> = peers.verbs.iter().flatten().cloned().collect();
            v.set_peers(&addrs, peers.cookie)
                .map_err(|e| CommError::Bootstrap(e.to_string()))?;
            return Ok(Box::new(v));
        }
        (_, Transport::Verbs) => {
            return Err(CommError::Bootstrap(format!(
                "transport verbs: ranks {without:?} have no RDMA verbs endpoint (see their logs); use PIPECAST_TRANSPORT=tcp or auto"
            )))
        }
        (_, Transport::Auto) if without.len() < peers.verbs.len() => {
            tracing::info!("transport auto: not verbs: ranks {without:?} have no usable RDMA device");
            why_not.push(format!(
                "not verbs: ranks {without:?} have no usable RDMA device"
            ));
        }
        _ => {}
    }
    let (macs, job_cookie) = (&peers.macs, peers.cookie);
    let Some(mut raw) = raw else {
        return match transport {
            Transport::RawEth { .. } => Err(CommError::Bootstrap(
                "transport raweth: this rank has no raw Ethernet endpoint".into(),
            )),
            _ => Ok(Box::new(tcp)),
        };
    };
    let missing: Vec<usize> = (0..macs.len()).filter(|&r| macs[r].is_none()).collect();
    let problem = if !missing.is_empty() {
        Some(format!(
            "ranks {missing:?} have no raw Ethernet endpoint (they run with transport tcp, or lack CAP_NET_RAW or an interface: see their logs)"
        ))
    } else if let Some(why) = (!hosts.shm)
        .then(|| one_nic_without_shm(&rail_macs(peers)[0], hosts.host_of))
        .flatten()
    {
        Some(why)
    } else {
        raw.set_rail_peers_on_hosts(rail_macs(peers), hosts.host_of, job_cookie)
            .err()
            .map(|e| e.to_string())
    };
    match problem {
        None => Ok(Box::new(raw)),
        Some(why) if *transport == Transport::Auto => {
            tracing::info!("transport auto: using tcp: {why}");
            why_not.push(format!("not raweth: {why}"));
            Ok(Box::new(tcp))
        }
        Some(why) => Err(CommError::Bootstrap(format!(
            "transport raweth: {why}; use PIPECAST_TRANSPORT=tcp or auto"
        ))),
    }
}

/// Why raw Ethernet cannot run when ranks of one host share a NIC (`macs[rank]`, rail 0) and
/// no shared memory links them: a frame to the host's own MAC never comes back from the
/// switch. The same words at every rank.
fn one_nic_without_shm(macs: &[socket::Mac], host_of: &[usize]) -> Option<String> {
    let mut first: std::collections::BTreeMap<(usize, socket::Mac), usize> = Default::default();
    for (rank, mac) in macs.iter().enumerate() {
        let host = *host_of.get(rank)?;
        if let Some(other) = first.insert((host, *mac), rank) {
            return Some(format!(
                "ranks {other} and {rank} share MAC {} on one host and shared memory is off (PIPECAST_SHM=off) or unavailable: raw Ethernet carries only the traffic between hosts",
                socket::mac_to_string(mac)
            ));
        }
    }
    None
}

/// Every rank's raw Ethernet MAC on each rail the whole job has (`macs[rail][rank]`): rail
/// 0 is every rank's NIC 0, and rail r ≥ 1 is there when every rank published a raw socket's
/// MAC for its NIC r (and for every NIC before it). The same answer at every rank: it reads
/// the same blobs. Fewer rails than lanes is right data at one NIC's speed for the lanes
/// beyond (they go on rail 0), as with TCP. `peers.macs` must all be present.
pub fn rail_macs(peers: &Roster) -> Vec<Vec<socket::Mac>> {
    let mut rails = vec![peers.macs.iter().flatten().copied().collect::<Vec<_>>()];
    let common = peers
        .rail_macs
        .iter()
        .map(|nics| nics.iter().take_while(|m| m.is_some()).count())
        .min()
        .unwrap_or(0);
    for rail in 1..=common {
        rails.push(
            peers
                .rail_macs
                .iter()
                .map(|nics| nics[rail - 1].expect("counted above"))
                .collect(),
        );
    }
    rails
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transports_parse_and_print_back() {
        for s in ["tcp", "auto", "raweth", "raweth:eth0", "verbs"] {
            assert_eq!(s.parse::<Transport>().unwrap().to_string(), s);
        }
        assert_eq!(
            "raweth:eth1".parse::<Transport>().unwrap(),
            Transport::RawEth {
                iface: Some("eth1".into())
            }
        );
        for bad in ["udp", "raweth:", "", "RAW"] {
            let e = bad.parse::<Transport>().unwrap_err();
            assert!(e.contains("raweth:IFACE"), "{e}");
        }
    }

    /// Raw Ethernet runs on as many rails as every rank published NIC MACs for, in order.
    #[test]
    fn raw_rails_are_those_every_rank_has() {
        let m = |rank: u8, nic: u8| [2, 0, 0, 0, nic, rank];
        let peers = |rail_macs: Vec<Vec<Option<socket::Mac>>>| Roster {
            addrs: Vec::new(),
            macs: vec![Some(m(0, 0)), Some(m(1, 0))],
            hosts: Vec::new(),
            verbs: Vec::new(),
            rails: Vec::new(),
            rail_macs,
            cpus: Vec::new(),
            links: Vec::new(),
            cookie: 1,
        };
        let both = peers(vec![vec![Some(m(0, 1))], vec![Some(m(1, 1))]]);
        assert_eq!(
            rail_macs(&both),
            vec![vec![m(0, 0), m(1, 0)], vec![m(0, 1), m(1, 1)]]
        );
        // Rank 1 has no raw socket on NIC 1 (or no NIC 1): one rail, at every rank.
        for short in [vec![None], Vec::new()] {
            let one = peers(vec![vec![Some(m(0, 1))], short]);
            assert_eq!(rail_macs(&one), vec![vec![m(0, 0), m(1, 0)]]);
        }
        // NIC 2's MACs without NIC 1's do not make a rail 2.
        let gap = peers(vec![vec![None, Some(m(0, 2))], vec![None, Some(m(1, 2))]]);
        assert_eq!(rail_macs(&gap).len(), 1);
        assert_eq!(iface_list(Some(" eth0, eth1 ,")), ["eth0", "eth1"]);
        // Two ranks of host 0 share a MAC: fine over shared memory, not without it.
        let macs = [m(0, 0), m(0, 0), m(2, 0)];
        let e = one_nic_without_shm(&macs, &[0, 0, 1]).unwrap();
        assert!(
            e.contains("ranks 0 and 1 share MAC") && e.contains("PIPECAST_SHM"),
            "{e}"
        );
        assert_eq!(one_nic_without_shm(&macs[1..], &[0, 1]), None);
        assert!(iface_list(None).is_empty());
    }

    #[test]
    fn tcp_stays_tcp_and_auto_without_raw_endpoint_is_tcp() {
        let tcp = TcpTransport::bind(0, "127.0.0.1").unwrap();
        let peers = Roster {
            addrs: vec![tcp.local_addr(); 2],
            macs: vec![None, None],
            hosts: vec!["h".into(); 2],
            verbs: vec![None, None],
            rails: vec![Vec::new(); 2],
            rail_macs: vec![Vec::new(); 2],
            cpus: vec![None, None],
            links: vec![None, None],
            cookie: 5,
        };
        let none = Candidates {
            raw: None,
            verbs: None,
        };
        let hosts = OnHosts {
            host_of: &[0, 0],
            shm: true,
        };
        let l = choose(&Transport::Auto, tcp, none, &peers, &hosts, &mut Vec::new()).unwrap();
        assert_eq!(l.describe(), "tcp");
        assert!(!l.serves_idle());
        assert_eq!(l.capabilities(), crate::transport::Capabilities::default());
        assert!(l.capabilities().reliable);
    }
}
