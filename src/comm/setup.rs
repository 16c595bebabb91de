//! One rank's setup of a communicator, in the two halves around the agreement
//! ([`Comm::join`](super::Comm::join)): what it can do alone (listen, open a raw socket) and
//! what needs everybody's blobs (the hosts' topology, the link, the connections, the progress
//! thread).

use super::agree::{self, Roster};
use super::progress::{self, Op};
use super::{cpus, hosts, link, CommError, Config};
use crate::topology::{InHost, Topology};
use crate::transport::raweth::RawEthTransport;
use crate::transport::router::Router;
use crate::transport::shm::{self, ShmLink, ShmMode};
use crate::transport::{Link, TcpTransport, Wake};
use crate::wire::bootstrap::{NicAddr, Repr, Status};
use crossbeam_channel::Sender;
use rand::RngCore;
use std::sync::Arc;
use std::thread::JoinHandle;

/// What a rank set up before the agreement.
pub struct Local {
    config: Config,
    tcp: TcpTransport,
    /// Where this rank's NICs 1, 2, … listen (empty with one NIC: see [`hosts::rail_ips`]).
    rails: Vec<std::net::SocketAddr>,
    raw: Option<RawEthTransport>,
    /// The RDMA verbs link (`verbs`, or `auto` where a device is usable), not connected yet.
    verbs: Option<link::VerbsNet>,
    /// The shared-memory link to ranks on this host (`None` with `PIPECAST_SHM=off`).
    shm: Option<ShmLink>,
    /// Unguessable: another job, or a host on the segment, cannot forge this job's frames or
    /// connections. Rank 0's is the job's.
    cookie: u64,
    settings: String,
    /// What this rank knows of its data link, for the profile every rank derives.
    link_seen: Option<crate::wire::bootstrap::LinkSeen>,
    /// Why `auto` could not take a faster link at this rank ([`Finished::why_not`]).
    why_not: Vec<String>,
}

/// What a rank has once every rank is ready.
pub struct Finished {
    pub config: Config,
    /// The topology it plans on.
    pub topology: Topology,
    /// The link that runs (`tcp`, `raweth:IFACE`, `tcp+shm:cma`, …).
    pub link: String,
    /// With transport `auto`: why a faster link was not taken, this rank's reasons and the
    /// agreed ones (empty when none was missed).
    pub why_not: Vec<String>,
    /// Raw Ethernet's payload per frame.
    pub frame_payload: Option<u64>,
    /// The progress thread, its queue and its wake descriptor.
    pub ops: Sender<Op>,
    pub wake: Arc<Wake>,
    pub progress: JoinHandle<()>,
    /// How many hosts the ranks are on (1: every rank shares this rank's host).
    pub hosts: usize,
    /// How many ranks share this rank's host, and how many CPUs they share between them
    /// (`None`: unknown; [`cpus::shared`]).
    pub host_ranks: usize,
    pub host_cpus: Option<usize>,
    /// The network the profile was derived from (`None`: given, or seed 003's Table 2).
    pub network: Option<crate::model::network::Network>,
    /// The agreed link rate (bits per second; the slowest rank's), also where a profile was
    /// given: a multicast root's pace (`None`: no rank knows its rate).
    pub link_bps: Option<u64>,
    /// Each rank's host (equal numbers: one host) and the CPUs it may run on, for the
    /// communicators made as views of this one.
    pub host_of: Vec<usize>,
    pub cpus: Vec<Option<crate::wire::bootstrap::CpuRange>>,
    /// The host keys the numbers of `host_of` stand for (`hosts::host_keys`, distinct, in
    /// the order of their numbers).
    pub host_keys: Vec<String>,
    /// Whether the link can add peers for communicators joined on this engine, or why not.
    pub grows: Result<(), String>,
    /// The agreed settings' text.
    pub settings: String,
    /// The multicast carrier, when every rank opens one (`PIPECAST_MULTICAST` not off and
    /// the ranks on more than one host: the same at every rank): this rank's, or why it has
    /// none. The probe follows the second round ([`super::multicast_setup`]).
    pub mcast: Option<Result<super::multicast_setup::Opened, String>>,
}

impl Local {
    /// Listens and opens the raw socket `config` asks for.
    pub fn open(rank: usize, size: usize, mut config: Config) -> crate::Result<Local> {
        if let Some(t) = &config.topology {
            hosts::check_file(t, size, &hosts::host_name(config.machine.as_deref()))?;
        }
        // On a topology with rails, one address per NIC (PIPECAST_IFACE=eth0,eth1, or the
        // interfaces of PIPECAST_TRANSPORT=raweth:eth0,eth1).
        let raw_list = match &config.transport {
            link::Transport::RawEth { iface: Some(i) } if i.contains(',') => Some(i.as_str()),
            _ => None,
        };
        let rail_ips = match config.topology.as_ref().map(Topology::rails) {
            Some(k) if k > 1 => hosts::rail_ips(config.iface.as_deref().or(raw_list), k)?,
            _ => None,
        };
        let ip = match (&config.ip, &rail_ips) {
            (Some(ip), _) => ip.clone(),
            (None, Some(ips)) => ips[0].to_string(),
            (None, None) => hosts::listen_ip(config.iface.as_deref())?,
        };
        config.ip = Some(ip.clone());
        let mut tcp = TcpTransport::bind_with(rank, &ip, config.io_uring)?;
        tcp.set_rto_min(config.tcp_rto_min);
        let extra: Vec<std::net::IpAddr> = rail_ips
            .iter()
            .flat_map(|ips| ips[1..].iter().map(|&ip| ip.into()))
            .collect();
        let rails = tcp.bind_rails(&extra)?;
        let mut why_not = Vec::new();
        let verbs = link::open_verbs(rank, size, &config, &mut why_not)?;
        let raw = link::open_raw(
            rank,
            &config,
            ip.parse().ok(),
            rail_ips.as_deref(),
            &mut why_not,
        )?;
        let shm = match config.shm {
            ShmMode::Off => None,
            mode => Some(ShmLink::bind(
                rank,
                &shm::socket_name(&tcp.local_addr()),
                mode,
                config.poll,
            )?),
        };
        Ok(Local {
            shm,
            settings: agree::settings_text(&config),
            link_seen: super::network::observe(&config, &ip),
            config,
            tcp,
            rails,
            raw,
            verbs,
            cookie: rand::rngs::OsRng.next_u64(),
            why_not,
        })
    }

    /// This rank's blob for the agreement.
    pub fn blob(&self, host: &str) -> Vec<u8> {
        Repr {
            status: Status::Ready,
            code: 0,
            cookie: self.cookie,
            addr: self.tcp.local_addr(),
            mac: self.raw.as_ref().map(|r| r.local_mac()),
            host: agree::truncate(host),
            settings: &self.settings,
            reason: "",
            verbs: self.verbs.as_ref().map(|v| v.local_addr()),
            rails: rail_nics(
                &self.rails,
                &self
                    .raw
                    .as_ref()
                    .map(|r| r.local_macs())
                    .unwrap_or_default(),
            ),
            cpus: cpus::this_thread(),
            link: self.link_seen,
        }
        .to_vec()
        .expect("lengths are bounded")
    }

    /// Builds the rest from everybody's blobs: topology, link (its connections, shared
    /// memory's included, are made as broadcasts need them), progress thread.
    pub fn finish(self, rank: usize, size: usize, peers: &Roster) -> crate::Result<Finished> {
        let Local {
            mut config,
            mut tcp,
            raw,
            verbs,
            shm,
            mut why_not,
            settings,
            ..
        } = self;
        let rank_hosts: Vec<hosts::RankHost> = peers
            .hosts
            .iter()
            .zip(&peers.addrs)
            .map(|(name, a)| hosts::RankHost {
                name: name.clone(),
                ip: a.ip(),
            })
            .collect();
        let keys = hosts::host_keys(&rank_hosts);
        // Every rank derives the same profile from the same blobs.
        let seen = super::network::agreed(&peers.links);
        let link_bps = seen.as_ref().map(|(net, _)| net.rate_bps);
        let network = if config.profile_given {
            None
        } else {
            seen.map(|(net, profile)| {
                config.profile = profile;
                net
            })
        };
        if rank == 0 {
            if let Some(net) = &network {
                tracing::info!(
                    "profile derived from the network: {} Mbit/s, {:.1} µs per segment end, host {:.0} MB/s",
                    net.rate_bps / 1_000_000,
                    net.segment_us,
                    net.host_bytes_per_us.unwrap_or(f64::NAN)
                );
            }
        }
        // Without shared memory (an agreed setting) a host's ranks talk through loopback
        // TCP, under the agreed connection bound: the plans feed a host of many such ranks by
        // a tree, not the fan-out (plan::two_level, topology::InHost).
        let in_host = match shm {
            Some(_) => InHost::Memory,
            None => InHost::Sockets {
                max_connections: config.max_connections,
            },
        };
        let topology = hosts::topology(config.topology.as_ref(), &rank_hosts, &keys)?
            .with_in_host(|_| in_host);
        tcp.set_peers(peers.addrs.clone(), peers.cookie);
        tcp.set_rails(&peers.rails);
        tcp.set_keepalive(config.timeout);
        tcp.set_max_connections(config.max_connections);
        let mut ids = std::collections::BTreeMap::new();
        let host_of: Vec<usize> = keys
            .iter()
            .map(|k| {
                let next = ids.len();
                *ids.entry(k.as_str()).or_insert(next)
            })
            .collect();
        let net = link::choose(
            &config.transport,
            tcp,
            link::Candidates { raw, verbs },
            peers,
            &link::OnHosts {
                host_of: &host_of,
                shm: shm.is_some(),
            },
            &mut why_not,
        )?;
        // Plan on the rails the link carries: lanes beyond them would all leave through NIC 0.
        let carried = net.capabilities().rails;
        let topology = if topology.rails() > carried {
            why_not.push(format!(
                "the topology has {} rails but {} carries {carried}: planning on {}",
                topology.rails(),
                net.describe(),
                if carried == 1 {
                    "rail 0 alone".to_string()
                } else {
                    format!("rails 0 to {}", carried - 1)
                }
            ));
            topology.first_rails(carried)
        } else {
            topology
        };
        // No mesh: each link connects to a peer when a broadcast that talks to it is posted,
        // inside the poll loop (TCP and shared memory alike: docs/scale.md, docs/shm.md).
        // Shared memory keeps its pairs under the same agreed bound as TCP its streams when
        // PIPECAST_MAX_CONNECTIONS is given; by default it keeps every pair (a host's ranks
        // are bounded by its CPUs; closing pairs as roots rotate was slower: docs/shm.md).
        let shm = shm.map(|mut s| {
            if config.max_connections_given {
                s.set_max_connections(config.max_connections);
            }
            s
        });
        let mut transport = on_host(rank, net, shm, &keys, peers);
        let link = transport.describe();
        let grows = if transport.can_grow() {
            Ok(())
        } else {
            Err(format!(
                "its link ({link}) cannot add peers: only TCP on one rail (with shared memory or not) can"
            ))
        };
        let frame_payload = transport.capabilities().max_frame;
        tracing::info!(rank, transport = %link, "joined");
        let wake = Arc::new(Wake::new().map_err(|e| {
            CommError::Bootstrap(format!("cannot create the progress thread's eventfd: {e}"))
        })?);
        let mut distinct = keys.clone();
        distinct.sort_unstable();
        distinct.dedup();
        let mcast =
            (config.multicast != super::MulticastMode::Off && distinct.len() > 1).then(|| {
                let shares_host = keys.iter().filter(|k| **k == keys[rank]).count() > 1;
                super::multicast_setup::open(&config, peers.cookie, shares_host)
            });
        // The link waits on the carrier's descriptors too (an epoll holding them and the wake
        // descriptor), so a frame ends the progress thread's wait at once.
        let waits = match &mcast {
            Some(Ok(c)) => {
                let fds = [&[wake.raw()][..], &c.fds()].concat();
                Some(crate::transport::wake::epoll_of(&fds).map_err(|e| {
                    CommError::Bootstrap(format!("cannot create the progress thread's epoll: {e}"))
                })?)
            }
            _ => None,
        };
        {
            use std::os::fd::AsRawFd;
            transport.set_wake(waits.as_ref().map_or(wake.raw(), |w| w.as_raw_fd()));
        }
        let (ops, rx) = crossbeam_channel::unbounded();
        let woken = wake.clone();
        let tuning = progress::Tuning {
            poll: config.poll,
            round: config.round,
            window: config.engine.window,
        };
        let progress = std::thread::Builder::new()
            .name(format!("pipecast-progress-{rank}"))
            .spawn(move || progress::serve(rank, transport, rx, woken, waits, tuning))
            .map_err(|e| {
                CommError::Bootstrap(crate::transport::limits::thread("the progress thread", &e))
            })?;
        let local: Vec<_> = (0..size)
            .filter(|&r| keys[r] == keys[rank])
            .map(|r| peers.cpus.get(r).copied().flatten())
            .collect();
        Ok(Finished {
            config,
            topology,
            link,
            why_not,
            frame_payload,
            ops,
            wake,
            progress,
            hosts: distinct.len(),
            host_ranks: local.len(),
            host_cpus: cpus::shared(&local),
            network,
            link_bps,
            host_of,
            host_keys: {
                let mut by_number: Vec<(usize, String)> =
                    ids.iter().map(|(k, &n)| (n, k.to_string())).collect();
                by_number.sort();
                by_number.into_iter().map(|(_, k)| k).collect()
            },
            grows,
            settings,
            cpus: peers.cpus.clone(),
            mcast,
        })
    }
}

/// The link to every peer: shared memory to the ranks on this rank's host (same host key),
/// the network link to the others. Without shared memory, or alone on its host, the network
/// link alone.
fn on_host(
    rank: usize,
    net: link::BoxedLink,
    shm: Option<ShmLink>,
    keys: &[String],
    peers: &Roster,
) -> link::BoxedLink {
    let local: Vec<bool> = keys.iter().map(|k| *k == keys[rank]).collect();
    let Some(mut shm) = shm.filter(|_| local.iter().filter(|&&l| l).count() > 1) else {
        return net;
    };
    shm.set_peers(
        peers.addrs.iter().map(shm::socket_name).collect(),
        peers.cookie,
    );
    shm.set_host_ranks(local.iter().filter(|&&l| l).count());
    let route = local.iter().map(|&l| usize::from(l)).collect();
    let links: Vec<Box<dyn Link>> = vec![net, Box::new(shm)];
    Box::new(Router::new(links, route))
}

/// The bootstrap entries of this rank's NICs 1, 2, … (none with one NIC: blob version 1):
/// where each listens, and the MAC of its raw socket (`macs[i]` is NIC i's, NIC 0's
/// included; absent without raw Ethernet).
fn rail_nics(addrs: &[std::net::SocketAddr], macs: &[[u8; 6]]) -> crate::wire::bootstrap::RailNics {
    let nics: Vec<NicAddr> = addrs
        .iter()
        .take(crate::wire::bootstrap::MAX_RAIL_NICS)
        .enumerate()
        .map(|(i, &addr)| NicAddr {
            addr,
            mac: macs.get(i + 1).copied(),
        })
        .collect();
    crate::wire::bootstrap::RailNics::new(&nics).expect("at most MAX_RAIL_NICS")
}
