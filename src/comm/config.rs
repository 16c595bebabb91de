//! The communicator's configuration ([`Config`], filled from the `PIPECAST_*` settings by
//! [`Settings::apply`](super::Settings::apply)) and its defaults.

use super::{Algorithm, ShmMode, Transport};
use crate::engine::Config as EngineConfig;
use crate::model::Profile;
use crate::plan::TreeKind;
use crate::topology::Topology;
use std::time::Duration;

/// Communicator settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Schedule of `bcast` (default `auto`).
    pub algorithm: Algorithm,
    /// Segment size (default: the model's choice, see [`resolve`]).
    pub segment: Option<u64>,
    /// Calibration profile for the model's choices (`auto`, segment size). Unless one is given
    /// ([`Config::profile_given`]), the communicator derives it from the agreed link rate and
    /// host cost (`model::network`, [`network`]); where no rank knows its link's rate, the
    /// 1 Gbit/s column of seed 003 Table 2. `pipecast calibrate` measures one.
    pub profile: Profile,
    /// The profile was given (env PIPECAST_PROFILE): the communicator keeps it as it is.
    pub profile_given: bool,
    /// The rate of this rank's data link, bits per second (env PIPECAST_LINK_RATE, tc's
    /// spelling; `pipecast lab run` sets the lab's); `None`: the topology's `gbps`, else the
    /// NIC's speed ([`network`]). Local: the ranks agree on the slowest.
    pub link_rate: Option<u64>,
    /// Window, credit batching (the engine's idle timeout is off: a late rank is waited for).
    pub engine: EngineConfig,
    /// How long a peer may show no sign of life (its process dead, its connection closed, no
    /// answer to heartbeats) before a broadcast that waits for it fails. A peer that is merely
    /// late (computing) is waited for however long it takes.
    pub timeout: Duration,
    /// Rank r runs on machine r; default: all ranks on one switch.
    pub topology: Option<Topology>,
    /// IP address to listen on (default: the interface of `iface`, else the one that reaches
    /// the rendezvous, else the first up non-loopback interface).
    pub ip: Option<String>,
    /// Interfaces or subnets to listen on (`btl_tcp_if_include` style), and the raw Ethernet
    /// interface when the transport names none (env PIPECAST_IFACE).
    pub iface: Option<String>,
    /// Transport of broadcast data (default `tcp`; env PIPECAST_TRANSPORT).
    pub transport: Transport,
    /// Raw Ethernet: receive through a PACKET_MMAP ring of this many bytes.
    pub raweth_ring: Option<usize>,
    /// How ranks on one host move segments (env PIPECAST_SHM; default: shared memory, single
    /// copy where the kernel allows it).
    pub shm: ShmMode,
    /// On a communicator whose ranks all share one host, the MPI glue leaves broadcasts below
    /// this many bytes to the MPI's own broadcast ([`Comm::defers_below`]; env
    /// PIPECAST_HOST_MIN_BYTES). `None`: the measured default, [`HOST_MIN_BYTES`].
    pub host_min_bytes: Option<u64>,
    /// How long a waiting thread (the caller waiting for its broadcast, the progress thread
    /// between broadcasts, a shared-memory link waiting for its peers) polls before it sleeps
    /// in the kernel (env PIPECAST_POLL_US; default [`POLL`]; see
    /// [`transport::wake::spin`](crate::transport::wake::spin)). Local: ranks may differ.
    pub poll: Duration,
    /// The longest one wait of the progress thread for its links while broadcasts run (env
    /// PIPECAST_ROUND_MS; default [`ROUND`]). Whatever moves a broadcast on (data from a peer,
    /// room to send, a newly posted broadcast) ends the wait at once, so a longer round changes
    /// nothing but how late a lost wake-up is noticed: tests raise it to make one unmistakable.
    /// Local: ranks may differ.
    pub round: Duration,
    /// Write this rank's trees, one line per distinct plan, to `DIR/colltree<rank>.json`
    /// (env PIPECAST_TREE_DUMP; [`tree_dump`]). Local: ranks may differ.
    pub tree_dump: Option<std::path::PathBuf>,
    /// The RDMA device, port and GID index of the verbs link (env PIPECAST_VERBS_DEVICE,
    /// _PORT, _GID_INDEX). Local: ranks may differ.
    pub verbs: crate::transport::verbs::DeviceConfig,
    /// Queue pairs the verbs link keeps: above this many, idle ones are closed (env
    /// PIPECAST_VERBS_MAX_QPS; default 64). Its completion queue is sized from it. Every
    /// rank must have the same (the agreement checks it when verbs may run).
    pub verbs_max_qps: usize,
    /// Connections the TCP link keeps open: above this many, idle ones are closed, least
    /// recently used first (env PIPECAST_MAX_CONNECTIONS; default
    /// [`MAX_CONNECTIONS`](crate::transport::tcp::MAX_CONNECTIONS)). Every rank the same
    /// (agreed).
    pub max_connections: usize,
    /// `max_connections` was given (PIPECAST_MAX_CONNECTIONS): shared memory then keeps at
    /// most that many pairs too. Not given, it keeps every pair it set up: a host's ranks are
    /// bounded by its CPUs, and closing pairs when roots rotate cost 25-49 % at 32 ranks on
    /// one host (docs/shm.md, "Closing idle pairs"). Every rank the same (agreed).
    pub max_connections_given: bool,
    /// Move TCP data through io_uring where the kernel offers it (env PIPECAST_IO_URING;
    /// default on; `false`: plain `sendmsg`/`readv`). Every rank the same (agreed).
    pub io_uring: bool,
    /// This rank's host identity in the bootstrap (env PIPECAST_MACHINE; `None`: the kernel's
    /// host name, [`hosts::host_name`]). Ranks differ, but either all give one or none does
    /// (agreed).
    pub machine: Option<String>,
    /// Reliable multicast broadcasts (env PIPECAST_MULTICAST; default off, `auto` with
    /// `PIPECAST_TREE=multicast`; docs/multicast.md). Every rank the same (agreed).
    pub multicast: MulticastMode,
    /// The TCP connections' minimum retransmission timeout, their delayed-ack ceiling half of
    /// it (env PIPECAST_TCP_RTO_MIN_US; [`timers`](crate::transport::tcp::timers); default
    /// `None`: the kernel's 200 ms, as where the kernel refuses it). Local: ranks may differ.
    pub tcp_rto_min: Option<Duration>,
}

/// Whether and over what broadcasts may use the network's multicast (`PIPECAST_MULTICAST`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MulticastMode {
    /// Never: trees only.
    Off,
    /// UDP/IP multicast where every rank receives the group (the setup's probe).
    Auto,
    /// UDP/IP multicast with an IGMP join (no privilege).
    Udp,
    /// Raw Ethernet frames to a group MAC (CAP_NET_RAW; one rank per interface).
    Ether,
}

impl std::fmt::Display for MulticastMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MulticastMode::Off => "off",
            MulticastMode::Auto => "auto",
            MulticastMode::Udp => "udp",
            MulticastMode::Ether => "ether",
        })
    }
}

impl std::str::FromStr for MulticastMode {
    type Err = String;
    fn from_str(s: &str) -> Result<MulticastMode, String> {
        match s.trim() {
            "off" => Ok(MulticastMode::Off),
            "auto" => Ok(MulticastMode::Auto),
            "udp" => Ok(MulticastMode::Udp),
            "ether" => Ok(MulticastMode::Ether),
            other => Err(format!(
                "{other:?}: expected auto, off, udp or ether (raw Ethernet, not carried yet)"
            )),
        }
    }
}

/// The default of [`Config::round`].
pub const ROUND: Duration = Duration::from_millis(50);

/// The default of [`Config::poll`]. Measured with `pipecast bench --local` (docs/shm.md).
pub const POLL: Duration = Duration::from_micros(50);

impl Default for Config {
    fn default() -> Config {
        Config {
            algorithm: Algorithm::Tree(TreeKind::Auto),
            segment: None,
            profile: Profile::builtin("1gbit").expect("built-in profile"),
            profile_given: false,
            link_rate: None,
            engine: EngineConfig::default(),
            timeout: Duration::from_secs(5),
            topology: None,
            ip: None,
            iface: None,
            transport: Transport::Tcp,
            raweth_ring: None,
            shm: ShmMode::Auto,
            host_min_bytes: None,
            poll: POLL,
            round: ROUND,
            tree_dump: None,
            verbs: Default::default(),
            verbs_max_qps: crate::transport::verbs::LinkConfig::default().max_qps,
            max_connections: crate::transport::tcp::MAX_CONNECTIONS,
            max_connections_given: false,
            io_uring: true,
            machine: None,
            multicast: MulticastMode::Off,
            tcp_rto_min: None,
        }
    }
}
