//! One rank's setup of a communicator, in the two halves around the agreement
//! ([`Comm::join`](super::Comm::join)): what it can do alone (listen, open a raw socket) and
//! what needs everybody's blobs (the hosts' topology, the link, the connections, the progress
//! thread).

use super::agree::{self, Peers};
use super::progress::{self, Op};
use super::{hosts, link, CommError, Config};
use crate::topology::Topology;
use crate::transport::raweth::RawEthTransport;
use crate::transport::{TcpTransport, Wake};
use crate::wire::bootstrap::{Repr, Status};
use crossbeam_channel::Sender;
use rand::RngCore;
use std::sync::Arc;
use std::thread::JoinHandle;

/// What a rank set up before the agreement.
pub struct Local {
    config: Config,
    tcp: TcpTransport,
    raw: Option<RawEthTransport>,
    /// Unguessable: another job, or a host on the segment, cannot forge this job's frames or
    /// connections. Rank 0's is the job's.
    cookie: u64,
    settings: String,
}

/// What a rank has once every rank is ready: its config, the topology it plans on, the link
/// that runs (`tcp`, `raweth:IFACE`), raw Ethernet's payload per frame, and the progress
/// thread with its queue.
pub type Finished = (
    Config,
    Topology,
    String,
    Option<u64>,
    Sender<Op>,
    Arc<Wake>,
    JoinHandle<()>,
);

impl Local {
    /// Listens and opens the raw socket `config` asks for.
    pub fn open(rank: usize, size: usize, mut config: Config) -> crate::Result<Local> {
        if let Some(t) = &config.topology {
            hosts::check_file(t, size, &hosts::host_name())?;
        }
        let ip = match &config.ip {
            Some(ip) => ip.clone(),
            None => hosts::listen_ip(config.iface.as_deref())?,
        };
        config.ip = Some(ip.clone());
        let tcp = TcpTransport::bind(rank, &ip)?;
        let raw = link::open_raw(rank, &config, ip.parse().ok())?;
        Ok(Local {
            settings: agree::settings_text(&config),
            config,
            tcp,
            raw,
            cookie: rand::rngs::OsRng.next_u64(),
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
        }
        .to_vec()
        .expect("lengths are bounded")
    }

    /// Builds the rest from everybody's blobs: topology, link (connected to every peer, so
    /// that no broadcast ever waits for a connection from a late rank), progress thread.
    pub fn finish(self, rank: usize, size: usize, peers: &Peers) -> crate::Result<Finished> {
        let Local {
            config,
            mut tcp,
            raw,
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
        let topology = hosts::topology(config.topology.as_ref(), &rank_hosts, &keys)?;
        tcp.set_peers(peers.addrs.clone(), peers.cookie);
        tcp.set_keepalive(config.timeout);
        let mut transport = link::choose(&config.transport, tcp, raw, &peers.macs, peers.cookie)?;
        // Every rank is here (it passed the first allgather), so connecting now never waits
        // for a late rank; afterwards broadcasts need no connection setup at all.
        let everyone: Vec<usize> = (0..size).filter(|&r| r != rank).collect();
        transport.connect(
            &everyone,
            config.timeout.max(std::time::Duration::from_secs(60)),
        )?;
        let link = transport.describe();
        let frame_payload = transport.frame_payload();
        tracing::info!(rank, transport = %link, "joined");
        let wake = Arc::new(Wake::new().map_err(|e| {
            CommError::Bootstrap(format!("cannot create the progress thread's eventfd: {e}"))
        })?);
        transport.set_wake(wake.raw());
        let (ops, rx) = crossbeam_channel::unbounded();
        let woken = wake.clone();
        let progress = std::thread::Builder::new()
            .name(format!("pipecast-progress-{rank}"))
            .spawn(move || progress::serve(rank, transport, rx, woken))
            .map_err(|e| CommError::Bootstrap(format!("cannot start the progress thread: {e}")))?;
        Ok((config, topology, link, frame_payload, ops, wake, progress))
    }
}
