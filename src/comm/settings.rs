//! Every environment variable pipecast reads, read here and nowhere else: the `PIPECAST_*`
//! settings of a communicator ([`Settings`]) for the tool
//! ([`Comm::from_env`](super::Comm::from_env)), the C API and the MPI glue
//! (`pipecast_comm_create`, `pipecast_config_from_env`), parsed into a [`Config`] by one
//! function; the MPI glue's own settings ([`GlueSettings`]); a job's place ([`Job`]); the
//! tracing filter ([`log_filter`]); the input size limit of the tool's files
//! ([`max_input_bytes`]); the cache directory ([`cache_home`]). The links and the rest of the
//! crate receive what they need as values.
//!
//! Settings are kept as text until [`Settings::apply`]: a bad value is then an error that
//! names the variable, and the communicator reports it to every rank through the bootstrap
//! agreement instead of failing alone (a rank that fails alone hangs an MPI job). Values are
//! read with blanks around them ignored, and an empty or blank value counts as unset,
//! wherever they come from (environment, C struct, MCA assignments).
//!
//! Exceptions, outside the library's settings: `lab` reads `PIPECAST_LAB_DIR` (where labs keep
//! their state) and `PATH` (where its commands are); `pipecast doctor` reads the MPI's
//! `OMPI_MCA_mca_base_component_path` and `HOME` to diagnose the MPI's installation. Child
//! processes get their settings through `Command::env`, which reads nothing.

use super::{Algorithm, CommError, Config, Transport};
pub use crate::input::parse_bytes;
use std::time::Duration;

/// The settings as text, each `None` when unset (or empty).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    /// `PIPECAST_TRANSPORT`: tcp, raweth, raweth:IFACE, verbs, auto.
    pub transport: Option<String>,
    /// `PIPECAST_TREE`: a tree name of `pipecast plan --tree`, or scatter-allgather.
    pub tree: Option<String>,
    /// `PIPECAST_SEGMENT`: bytes (K/M/G suffixes).
    pub segment: Option<String>,
    /// `PIPECAST_TOPOLOGY`: a topology file.
    pub topology: Option<String>,
    /// `PIPECAST_TIMEOUT_MS`: how long a peer may show no sign of life.
    pub timeout_ms: Option<String>,
    /// `PIPECAST_PROFILE`: a calibration profile file, or 100mbit / 1gbit.
    pub profile: Option<String>,
    /// `PIPECAST_LINK_RATE`: the data link's rate (tc's spelling: 100mbit, 10gbit).
    pub link_rate: Option<String>,
    /// `PIPECAST_IFACE`: interfaces or subnets to listen on; the raw Ethernet interface.
    pub iface: Option<String>,
    /// `PIPECAST_IP`: the address to listen on.
    pub ip: Option<String>,
    /// `PIPECAST_WINDOW`: most segments in flight to one child.
    pub window: Option<String>,
    /// `PIPECAST_RAWETH_RING`: receive raw Ethernet through a PACKET_MMAP ring of this size.
    pub raweth_ring: Option<String>,
    /// `PIPECAST_SHM`: how ranks on one host move segments (auto, cma, ring, off).
    pub shm: Option<String>,
    /// `PIPECAST_HOST_MIN_BYTES`: on one host, the MPI glue leaves smaller broadcasts to the MPI.
    pub host_min_bytes: Option<String>,
    /// `PIPECAST_POLL_US`: how long a waiter polls before it sleeps.
    pub poll_us: Option<String>,
    /// `PIPECAST_ROUND_MS`: the longest one wait of the progress thread for its links.
    pub round_ms: Option<String>,
    /// `PIPECAST_TREE_DUMP`: a directory for per-rank tree dumps (MPICH's `COLL_TREE_DUMP`).
    pub tree_dump: Option<String>,
    /// `PIPECAST_VERBS_DEVICE`: the RDMA device of the verbs link (default: the first).
    pub verbs_device: Option<String>,
    /// `PIPECAST_VERBS_PORT`: its port (default 1).
    pub verbs_port: Option<String>,
    /// `PIPECAST_VERBS_GID_INDEX`: its GID table index (RoCE v2: see `show_gids`; default 0).
    pub verbs_gid_index: Option<String>,
    /// `PIPECAST_VERBS_MAX_QPS`: queue pairs the verbs link keeps before it closes idle ones
    /// (default 64; every rank the same).
    pub verbs_max_qps: Option<String>,
    /// `PIPECAST_MAX_CONNECTIONS`: connections the TCP link keeps before it closes idle ones
    /// (default 16; every rank the same).
    pub max_connections: Option<String>,
    /// `PIPECAST_IO_URING`: 0 moves TCP data with plain `sendmsg`/`readv`, 1 (the default)
    /// through io_uring where the kernel offers it (every rank the same).
    pub io_uring: Option<String>,
    /// `PIPECAST_MACHINE`: this rank's host identity (default: the kernel's host name).
    pub machine: Option<String>,
    /// `PIPECAST_MAX_INPUT_BYTES`: the largest topology or profile file read
    /// ([`crate::input::max_input_bytes`]).
    pub max_input_bytes: Option<String>,
    /// `PIPECAST_MULTICAST`: auto, off, udp, ether.
    pub multicast: Option<String>,
    /// `PIPECAST_TCP_RTO_MIN_US`: the TCP connections' minimum retransmission timeout in
    /// microseconds (0: the kernel's).
    pub tcp_rto_min_us: Option<String>,
}

/// The variables, in the order errors and documentation list them.
pub const VARIABLES: [&str; 26] = [
    "PIPECAST_TRANSPORT",
    "PIPECAST_TREE",
    "PIPECAST_SEGMENT",
    "PIPECAST_TOPOLOGY",
    "PIPECAST_TIMEOUT_MS",
    "PIPECAST_PROFILE",
    "PIPECAST_LINK_RATE",
    "PIPECAST_IFACE",
    "PIPECAST_IP",
    "PIPECAST_WINDOW",
    "PIPECAST_RAWETH_RING",
    "PIPECAST_SHM",
    "PIPECAST_HOST_MIN_BYTES",
    "PIPECAST_POLL_US",
    "PIPECAST_ROUND_MS",
    "PIPECAST_TREE_DUMP",
    "PIPECAST_VERBS_DEVICE",
    "PIPECAST_VERBS_PORT",
    "PIPECAST_VERBS_GID_INDEX",
    "PIPECAST_VERBS_MAX_QPS",
    "PIPECAST_MAX_CONNECTIONS",
    "PIPECAST_IO_URING",
    "PIPECAST_MACHINE",
    "PIPECAST_MAX_INPUT_BYTES",
    "PIPECAST_MULTICAST",
    "PIPECAST_TCP_RTO_MIN_US",
];

/// Longest text [`Settings::parse_assignments`] reads.
pub const MAX_ASSIGNMENTS: usize = 64 * 1024;

/// The one read of the process environment: `name`'s value, `None` when it is unset, empty or
/// blank (or not UTF-8).
fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// `PIPECAST_LOG`: the tracing filter of the tool and the C library (`pipecast=debug`).
pub fn log_filter() -> Option<String> {
    var("PIPECAST_LOG")
}

/// The limit on the files the tool reads (`PIPECAST_MAX_INPUT_BYTES`, parsed by
/// [`crate::input::max_input_bytes`]): the error names the variable and its value.
pub fn max_input_bytes() -> Result<u64, String> {
    crate::input::max_input_bytes(var(crate::input::MAX_INPUT_ENV).as_deref())
}

/// `PIPECAST_OMPI5_ROOT`: where `bench/ompi5.sh` keeps the Open MPI 5 root, if not in the cache.
pub fn ompi5_root() -> Option<std::path::PathBuf> {
    var("PIPECAST_OMPI5_ROOT").map(Into::into)
}

/// Where per-user caches go: `$XDG_CACHE_HOME`, else `$HOME/.cache` (`None`: neither set).
pub fn cache_home() -> Option<std::path::PathBuf> {
    var("XDG_CACHE_HOME")
        .map(Into::into)
        .or_else(|| var("HOME").map(|h| std::path::Path::new(&h).join(".cache")))
}

/// This process's place in a job started by any launcher: `PIPECAST_RANK`, `PIPECAST_SIZE`
/// and `PIPECAST_RENDEZVOUS` (`host:port` where rank 0 listens for the bootstrap).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub rank: usize,
    pub size: usize,
    pub rendezvous: String,
}

impl Job {
    /// The job of the environment; `None` when `PIPECAST_RANK` is not set (a lone process).
    /// The others missing, or a rank not below the size, is an error naming the variable.
    pub fn from_env() -> Result<Option<Job>, CommError> {
        Job::parse(
            var("PIPECAST_RANK").as_deref(),
            var("PIPECAST_SIZE").as_deref(),
            var("PIPECAST_RENDEZVOUS").as_deref(),
        )
    }

    /// [`Job::from_env`] on given values (pure).
    pub fn parse(
        rank: Option<&str>,
        size: Option<&str>,
        rendezvous: Option<&str>,
    ) -> Result<Option<Job>, CommError> {
        let Some(rank) = rank else {
            return Ok(None);
        };
        fn given<'a>(name: &'static str, v: Option<&'a str>) -> Result<&'a str, CommError> {
            v.map(str::trim).ok_or_else(|| CommError::Env {
                name,
                problem: "not set, but PIPECAST_RANK is: set PIPECAST_RANK, PIPECAST_SIZE and PIPECAST_RENDEZVOUS=host:port together".into(),
            })
        }
        let number = |name: &'static str, v: &str| {
            v.trim().parse::<usize>().map_err(|_| CommError::Env {
                name,
                problem: format!("{v:?}: expected a whole number"),
            })
        };
        let rank = number("PIPECAST_RANK", rank)?;
        let size = number("PIPECAST_SIZE", given("PIPECAST_SIZE", size)?)?;
        let rendezvous = given("PIPECAST_RENDEZVOUS", rendezvous)?.to_string();
        if rank >= size {
            return Err(CommError::Env {
                name: "PIPECAST_RANK",
                problem: format!("{rank} is not below PIPECAST_SIZE={size}"),
            });
        }
        Ok(Some(Job {
            rank,
            size,
            rendezvous,
        }))
    }
}

/// The longest `PIPECAST_MACHINE`, in bytes (a host name has at most 64).
pub const MAX_MACHINE: usize = 255;

/// A machine name as `PIPECAST_MACHINE` gives it: blanks around it ignored; at most
/// [`MAX_MACHINE`] bytes, none of them blank or a control character (the name travels in the
/// bootstrap blob and names a topology's machine).
pub fn check_machine(v: &str) -> Result<String, String> {
    let name = v.trim();
    if name.is_empty()
        || name.len() > MAX_MACHINE
        || name.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(format!(
            "{v:?}: expected a machine name of 1 to {MAX_MACHINE} bytes without blanks or control characters"
        ));
    }
    Ok(name.to_string())
}

/// `PIPECAST_TCP_RTO_MIN_US` (blanks around it ignored): `None` for 0 (the kernel's minimum
/// RTO), else microseconds up to the kernel's own 200 ms.
pub fn parse_rto_min(v: &str) -> Result<Option<Duration>, String> {
    let limit = crate::transport::tcp::timers::RTO_MIN_LIMIT.as_micros() as u64;
    match v.trim().parse::<u64>() {
        Ok(0) => Ok(None),
        Ok(us) if us <= limit => Ok(Some(Duration::from_micros(us))),
        _ => Err(format!(
            "{v:?}: expected microseconds from 1 to {limit} (such as 5000; the kernel rounds up to its clock ticks and refuses under two), or 0 for the kernel's 200 ms"
        )),
    }
}

impl Settings {
    /// Reads the `PIPECAST_*` variables (empty ones count as unset).
    pub fn from_env() -> Settings {
        let mut s = Settings::default();
        for (name, slot) in VARIABLES.iter().zip(s.slots()) {
            *slot = var(name);
        }
        s
    }

    /// The input size limit these settings give (`PIPECAST_MAX_INPUT_BYTES`, else the
    /// default): the bound on the topology and profile files [`Settings::apply`] reads.
    pub fn input_limit(&self) -> Result<u64, CommError> {
        crate::input::max_input_bytes(self.max_input_bytes.as_deref()).map_err(|_| CommError::Env {
            name: "PIPECAST_MAX_INPUT_BYTES",
            problem: format!(
                "{:?}: expected a positive byte count such as 67108864 or 64M",
                self.max_input_bytes.as_deref().unwrap_or_default()
            ),
        })
    }

    /// Reads settings written as `PIPECAST_NAME=value` assignments, one per line or separated
    /// by `;` (blank items ignored; an empty value counts as unset, as in the environment).
    /// The MPI glue passes its MCA parameters this way (`pipecast_comm_create_with`). An
    /// unknown name, an item without `=`, a name given twice or more than [`MAX_ASSIGNMENTS`]
    /// bytes is an error that says so.
    pub fn parse_assignments(text: &str) -> Result<Settings, String> {
        if text.len() > MAX_ASSIGNMENTS {
            return Err(format!(
                "settings text of {} bytes, at most {MAX_ASSIGNMENTS}",
                text.len()
            ));
        }
        let mut s = Settings::default();
        let mut seen = [false; VARIABLES.len()];
        for item in text
            .split(['\n', ';'])
            .map(str::trim)
            .filter(|i| !i.is_empty())
        {
            let Some((name, value)) = item.split_once('=') else {
                return Err(format!("{item:?}: expected PIPECAST_NAME=value"));
            };
            let name = name.trim();
            let Some(i) = VARIABLES.iter().position(|v| *v == name) else {
                return Err(format!(
                    "unknown setting {name:?}; known: {}",
                    VARIABLES.join(", ")
                ));
            };
            if std::mem::replace(&mut seen[i], true) {
                return Err(format!("{name} given twice"));
            }
            let value = value.trim();
            *s.slots()[i] = (!value.is_empty()).then(|| value.to_string());
        }
        Ok(s)
    }

    fn slots(&mut self) -> [&mut Option<String>; VARIABLES.len()] {
        [
            &mut self.transport,
            &mut self.tree,
            &mut self.segment,
            &mut self.topology,
            &mut self.timeout_ms,
            &mut self.profile,
            &mut self.link_rate,
            &mut self.iface,
            &mut self.ip,
            &mut self.window,
            &mut self.raweth_ring,
            &mut self.shm,
            &mut self.host_min_bytes,
            &mut self.poll_us,
            &mut self.round_ms,
            &mut self.tree_dump,
            &mut self.verbs_device,
            &mut self.verbs_port,
            &mut self.verbs_gid_index,
            &mut self.verbs_max_qps,
            &mut self.max_connections,
            &mut self.io_uring,
            &mut self.machine,
            &mut self.max_input_bytes,
            &mut self.multicast,
            &mut self.tcp_rto_min_us,
        ]
    }

    /// These settings, with `base`'s where these have none.
    pub fn or(mut self, mut base: Settings) -> Settings {
        for (mine, theirs) in self.slots().into_iter().zip(base.slots()) {
            if mine.is_none() {
                *mine = theirs.take();
            }
        }
        self
    }

    /// Parses every setting that is present into `config`; the error names the variable.
    pub fn apply(&self, config: &mut Config) -> Result<(), CommError> {
        let bad = |name: &'static str, problem: String| CommError::Env { name, problem };
        let limit = self.input_limit()?;
        if let Some(v) = &self.io_uring {
            config.io_uring = match v.trim() {
                "0" => false,
                "1" => true,
                _ => {
                    return Err(bad(
                        "PIPECAST_IO_URING",
                        format!("{v:?}: expected 0 (plain sendmsg and readv) or 1 (io_uring where the kernel has it)"),
                    ))
                }
            };
        }
        if let Some(v) = &self.machine {
            config.machine = Some(check_machine(v).map_err(|e| bad("PIPECAST_MACHINE", e))?);
        }
        if let Some(v) = &self.transport {
            config.transport = v
                .parse::<Transport>()
                .map_err(|e| bad("PIPECAST_TRANSPORT", e))?;
        }
        if let Some(v) = &self.tree {
            config.algorithm = v
                .trim()
                .parse::<Algorithm>()
                .map_err(|e| bad("PIPECAST_TREE", format!("{e} (or scatter-allgather)")))?;
        }
        let forced = config.algorithm == Algorithm::Tree(crate::plan::TreeKind::Multicast);
        match &self.multicast {
            Some(v) => {
                config.multicast = v
                    .parse::<super::config::MulticastMode>()
                    .map_err(|e| bad("PIPECAST_MULTICAST", e))?;
                if forced && config.multicast == super::config::MulticastMode::Off {
                    return Err(bad(
                        "PIPECAST_TREE",
                        "multicast, but PIPECAST_MULTICAST=off: set PIPECAST_MULTICAST=auto (or leave it unset)".into(),
                    ));
                }
            }
            // The tree asks for multicast: set up the carrier it needs.
            None if forced => config.multicast = super::config::MulticastMode::Auto,
            None => {}
        }
        if let Some(v) = &self.segment {
            let s = parse_bytes(v)
                .filter(|s| (1..=u64::from(u32::MAX)).contains(s))
                .ok_or_else(|| {
                    bad(
                        "PIPECAST_SEGMENT",
                        format!("{v:?}: expected bytes between 1 and 4G, such as 65536 or 64K"),
                    )
                })?;
            config.segment = Some(s);
        }
        if let Some(v) = &self.timeout_ms {
            // At most u32 milliseconds (49 days): the C config's field holds it.
            let ms: u64 = v
                .trim()
                .parse()
                .ok()
                .filter(|ms| (1..=u64::from(u32::MAX)).contains(ms))
                .ok_or_else(|| {
                    bad(
                        "PIPECAST_TIMEOUT_MS",
                        format!("{v:?}: expected milliseconds from 1 to 4294967295"),
                    )
                })?;
            config.timeout = Duration::from_millis(ms);
        }
        if let Some(v) = &self.window {
            config.engine.window = v.trim().parse().ok().filter(|w| *w >= 1).ok_or_else(|| {
                bad(
                    "PIPECAST_WINDOW",
                    format!("{v:?}: expected a whole number of segments, at least 1"),
                )
            })?;
        }
        if let Some(v) = &self.raweth_ring {
            let bytes = parse_bytes(v).filter(|b| *b > 0).ok_or_else(|| {
                bad(
                    "PIPECAST_RAWETH_RING",
                    format!("{v:?}: expected bytes such as 4194304 or 4M"),
                )
            })?;
            config.raweth_ring = Some(bytes as usize);
        }
        if let Some(v) = &self.host_min_bytes {
            config.host_min_bytes = Some(parse_bytes(v).ok_or_else(|| {
                bad(
                    "PIPECAST_HOST_MIN_BYTES",
                    format!("{v:?}: expected bytes such as 0, 65536 or 1M"),
                )
            })?);
        }
        if let Some(v) = &self.poll_us {
            let us: u64 = v
                .trim()
                .parse()
                .ok()
                .filter(|us| *us <= 1_000_000)
                .ok_or_else(|| {
                    bad(
                        "PIPECAST_POLL_US",
                        format!("{v:?}: expected microseconds from 0 (never poll) to 1000000"),
                    )
                })?;
            config.poll = Duration::from_micros(us);
        }
        if let Some(v) = &self.round_ms {
            let ms: u64 = v
                .trim()
                .parse()
                .ok()
                .filter(|ms| (1..=60_000).contains(ms))
                .ok_or_else(|| {
                    bad(
                        "PIPECAST_ROUND_MS",
                        format!("{v:?}: expected milliseconds from 1 to 60000"),
                    )
                })?;
            config.round = Duration::from_millis(ms);
        }
        if let Some(v) = &self.tcp_rto_min_us {
            config.tcp_rto_min = parse_rto_min(v).map_err(|e| bad("PIPECAST_TCP_RTO_MIN_US", e))?;
        }
        if let Some(v) = &self.shm {
            config.shm = v.parse().map_err(|e| bad("PIPECAST_SHM", e))?;
        }
        if let Some(v) = &self.iface {
            config.iface = Some(v.trim().to_string());
        }
        if let Some(v) = &self.ip {
            config.ip = Some(v.trim().to_string());
        }
        if let Some(v) = &self.verbs_device {
            config.verbs.device = Some(v.trim().to_string());
        }
        for (v, name, slot) in [
            (
                &self.verbs_port,
                "PIPECAST_VERBS_PORT",
                &mut config.verbs.port,
            ),
            (
                &self.verbs_gid_index,
                "PIPECAST_VERBS_GID_INDEX",
                &mut config.verbs.gid_index,
            ),
        ] {
            if let Some(v) = v {
                *slot = v.trim().parse().map_err(|_| {
                    bad(
                        name,
                        format!("{v:?}: expected a whole number from 0 to 255"),
                    )
                })?;
            }
        }
        // A count from 1 to `most` of `what`.
        let count = |v: &str, name: &'static str, what: &str, most: usize| {
            v.trim()
                .parse()
                .ok()
                .filter(|n| (1..=most).contains(n))
                .ok_or_else(|| {
                    bad(
                        name,
                        format!("{v:?}: expected a whole number of {what} from 1 to {most}"),
                    )
                })
        };
        if let Some(v) = &self.verbs_max_qps {
            let most = crate::transport::verbs::MAX_QPS_LIMIT;
            config.verbs_max_qps = count(v, "PIPECAST_VERBS_MAX_QPS", "queue pairs", most)?;
        }
        if let Some(v) = &self.max_connections {
            let most = crate::transport::tcp::MAX_CONNECTIONS_LIMIT;
            config.max_connections = count(v, "PIPECAST_MAX_CONNECTIONS", "connections", most)?;
            config.max_connections_given = true;
        }
        if let Some(v) = &self.tree_dump {
            config.tree_dump = Some(v.into());
        }
        if let Some(v) = &self.profile {
            config.profile = crate::input::load_profile(v, limit)
                .map_err(|e| bad("PIPECAST_PROFILE", e.to_string()))?;
            config.profile_given = true;
        }
        if let Some(v) = &self.link_rate {
            config.link_rate = Some(
                crate::input::parse_rate(v)
                    .filter(|bits| *bits > 0)
                    .ok_or_else(|| {
                        bad(
                            "PIPECAST_LINK_RATE",
                            format!("{v:?}: expected a rate such as 100mbit, 10gbit or 25gbit"),
                        )
                    })?,
            );
        }
        if let Some(v) = &self.topology {
            config.topology = Some(
                crate::input::read_topology(v.as_ref(), limit)
                    .map_err(|e| bad("PIPECAST_TOPOLOGY", e.to_string()))?,
            );
        }
        Ok(())
    }
}

/// The MPI glue's own settings (`ffi/common/pipecast_glue.h`): which broadcasts the glue gives
/// pipecast and how its point-to-point path moves the mid-size ones. The shim reads them from
/// [`GLUE_VARIABLES`] ([`GlueSettings::read`], through `pipecast_glue_settings_from_env`), the
/// Open MPI component from its MCA parameters; both check them here
/// ([`GlueSettings::check`]). They are not [`Settings`]: pipecast's communicator never sees
/// them; the glue's ranks compare them at a communicator's first broadcast (`pcg_agree`), where
/// a rank with a bad one votes pipecast off with its reason, so every rank turns it off
/// together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GlueSettings {
    /// `PIPECAST_MIN_BYTES`: smaller broadcasts go to the MPI's own (default 65536).
    pub min_bytes: u64,
    /// `PIPECAST_PML_BELOW`: from `min_bytes` up to this, pipecast's tree over the MPI's
    /// point-to-point layer (default 524288; 0: never).
    pub pml_below: u64,
    /// `PIPECAST_PML_SEGMENT`: that path's segment size (default 16384; 0: the cost model's).
    pub pml_segment: u64,
    /// `PIPECAST_PML_WINDOW`: its receives posted ahead and sends in flight per child.
    pub pml_window: u64,
}

/// The glue's variables, in the order of [`GlueSettings`]'s fields, then `PIPECAST_VERBOSE`
/// (the glue's verbosity: this rank's own, not compared).
pub const GLUE_VARIABLES: [&str; 5] = [
    "PIPECAST_MIN_BYTES",
    "PIPECAST_PML_BELOW",
    "PIPECAST_PML_SEGMENT",
    "PIPECAST_PML_WINDOW",
    "PIPECAST_VERBOSE",
];

/// The largest `pml_window` (`PCG_WINDOW_MAX` in the glue).
pub const GLUE_WINDOW_MAX: u64 = 16;

/// The largest `pml_segment`: one MPI message of an `int` count.
pub const GLUE_SEGMENT_MAX: u64 = i32::MAX as u64;

/// The largest verbosity; a larger `PIPECAST_VERBOSE` counts as this.
pub const GLUE_VERBOSE_MAX: u32 = 9;

impl Default for GlueSettings {
    fn default() -> GlueSettings {
        GlueSettings {
            min_bytes: 65536,
            pml_below: 524288,
            pml_segment: 16384,
            pml_window: 4,
        }
    }
}

impl GlueSettings {
    /// The glue's settings and verbosity from `get` (a variable's value, `None` when unset or
    /// blank; the shim passes the environment). Each value is read as [`Settings::apply`]
    /// reads its own (blanks around it ignored, byte sizes by [`parse_bytes`]). Every value that
    /// parsed is kept, and the default stands for one that did not, so that a rank with a bad
    /// value still joins the agreement, and says why at its verbosity; the error names the
    /// first bad variable.
    pub fn read(
        get: impl Fn(&str) -> Option<String>,
    ) -> (GlueSettings, u32, Result<(), CommError>) {
        let bad = |name: &'static str, problem: String| CommError::Env { name, problem };
        let mut s = GlueSettings::default();
        let mut first = Ok(());
        let mut keep = |r: Result<(), CommError>| {
            if first.is_ok() {
                first = r;
            }
        };
        for (name, slot, most) in [
            (GLUE_VARIABLES[0], &mut s.min_bytes, i64::MAX as u64),
            (GLUE_VARIABLES[1], &mut s.pml_below, i64::MAX as u64),
            (GLUE_VARIABLES[2], &mut s.pml_segment, GLUE_SEGMENT_MAX),
        ] {
            if let Some(v) = get(name) {
                match parse_bytes(&v).filter(|b| *b <= most) {
                    Some(b) => *slot = b,
                    None => keep(Err(bad(
                        name,
                        format!("{v:?}: expected bytes from 0 to {most}, such as 0, 65536 or 64K"),
                    ))),
                }
            }
        }
        if let Some(v) = get(GLUE_VARIABLES[3]) {
            match v
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|w| (1..=GLUE_WINDOW_MAX).contains(w))
            {
                Some(w) => s.pml_window = w,
                None => keep(Err(bad(
                    GLUE_VARIABLES[3],
                    format!(
                        "{v:?}: expected a whole number of segments from 1 to {GLUE_WINDOW_MAX}"
                    ),
                ))),
            }
        }
        let mut verbose = 0;
        if let Some(v) = get(GLUE_VARIABLES[4]) {
            match v.trim().parse::<u64>() {
                Ok(n) => verbose = n.min(u64::from(GLUE_VERBOSE_MAX)) as u32,
                Err(_) => keep(Err(bad(
                    GLUE_VARIABLES[4],
                    format!("{v:?}: expected a whole number (0 silent, 1 selection and summary, 2 every broadcast)"),
                ))),
            }
        }
        (s, verbose, first)
    }

    /// [`GlueSettings::read`] of the process environment.
    pub fn from_env() -> (GlueSettings, u32, Result<(), CommError>) {
        GlueSettings::read(var)
    }

    /// Whether settings given as the C glue holds them (64-bit signed; the component's MCA
    /// parameters) are usable: the same bounds [`GlueSettings::read`] keeps.
    pub fn check(
        min_bytes: i64,
        pml_below: i64,
        pml_segment: i64,
        pml_window: i64,
    ) -> Result<GlueSettings, String> {
        let (Ok(min), Ok(below), Ok(seg)) = (
            u64::try_from(min_bytes),
            u64::try_from(pml_below),
            u64::try_from(pml_segment),
        ) else {
            return Err(format!(
                "min_bytes {min_bytes}, pml_below {pml_below} and pml_segment {pml_segment} must be from 0"
            ));
        };
        if seg > GLUE_SEGMENT_MAX {
            return Err(format!(
                "pml_segment {seg} is more than {GLUE_SEGMENT_MAX} (one MPI message)"
            ));
        }
        let window = u64::try_from(pml_window)
            .ok()
            .filter(|w| (1..=GLUE_WINDOW_MAX).contains(w))
            .ok_or_else(|| format!("pml_window {pml_window} is not from 1 to {GLUE_WINDOW_MAX}"))?;
        Ok(GlueSettings {
            min_bytes: min,
            pml_below: below,
            pml_segment: seg,
            pml_window: window,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignments_as_the_glue_writes_them() {
        let s = Settings::parse_assignments(
            "PIPECAST_VERBS_DEVICE=mlx5_0\nPIPECAST_VERBS_PORT = 2; PIPECAST_VERBS_GID_INDEX=3;;\n PIPECAST_TREE=;PIPECAST_VERBS_MAX_QPS=8;PIPECAST_MAX_CONNECTIONS=2",
        )
        .unwrap();
        assert_eq!(s.verbs_device.as_deref(), Some("mlx5_0"));
        assert_eq!(s.verbs_port.as_deref(), Some("2"));
        assert_eq!(s.verbs_gid_index.as_deref(), Some("3"));
        assert_eq!(s.tree, None);
        let mut c = Config::default();
        s.apply(&mut c).unwrap();
        assert_eq!(c.verbs.device.as_deref(), Some("mlx5_0"));
        assert_eq!((c.verbs.port, c.verbs.gid_index), (2, 3));
        assert_eq!(c.verbs_max_qps, 8);
        assert_eq!(c.max_connections, 2);
        assert_eq!(
            Config::default().verbs_max_qps,
            crate::transport::verbs::LinkConfig::default().max_qps
        );
        assert_eq!(
            Settings::parse_assignments("").unwrap(),
            Settings::default()
        );
        for (bad, says) in [
            ("PIPECAST_NOPE=1", "unknown setting \"PIPECAST_NOPE\""),
            ("PIPECAST_TREE", "expected PIPECAST_NAME=value"),
            (
                "PIPECAST_TREE=a;PIPECAST_TREE=b",
                "PIPECAST_TREE given twice",
            ),
        ] {
            let e = Settings::parse_assignments(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let long = "PIPECAST_TREE=linear;".repeat(MAX_ASSIGNMENTS / 10);
        assert!(Settings::parse_assignments(&long)
            .unwrap_err()
            .contains("at most"));
    }

    #[test]
    fn present_settings_win_and_bad_values_name_the_variable() {
        let over = Settings {
            tree: Some("binary".into()),
            ..Settings::default()
        };
        let base = Settings {
            tree: Some("linear".into()),
            window: Some("4".into()),
            ..Settings::default()
        };
        let s = over.or(base);
        let mut c = Config::default();
        s.apply(&mut c).unwrap();
        assert_eq!(c.algorithm.to_string(), "binary");
        assert_eq!(c.engine.window, 4);
        let bad = [
            "PIPECAST_TRANSPORT=carrier-pigeon",
            "PIPECAST_WINDOW=0",
            "PIPECAST_TOPOLOGY=/nonexistent/t.json",
            "PIPECAST_SEGMENT=0",
            "PIPECAST_POLL_US=-1",
            "PIPECAST_LINK_RATE=fast",
            "PIPECAST_ROUND_MS=0",
            "PIPECAST_VERBS_GID_INDEX=300",
            "PIPECAST_TIMEOUT_MS=4294967296",
            "PIPECAST_IO_URING=maybe",
            "PIPECAST_IO_URING=2",
            "PIPECAST_MACHINE=two words",
            "PIPECAST_MAX_INPUT_BYTES=lots",
            "PIPECAST_MAX_INPUT_BYTES=0",
        ]
        .map(String::from)
        .into_iter()
        .chain([format!("PIPECAST_MACHINE={}", "m".repeat(MAX_MACHINE + 1))])
        .chain(["0", "-1", "many", "1000000"].map(|v| format!("PIPECAST_VERBS_MAX_QPS={v}")))
        .chain(["0", "-3", "few", "2000000"].map(|v| format!("PIPECAST_MAX_CONNECTIONS={v}")));
        for text in bad {
            let name = text.split('=').next().unwrap();
            let s = Settings::parse_assignments(&text).unwrap();
            let e = s.apply(&mut Config::default()).unwrap_err().to_string();
            assert!(e.contains(name), "{text}: {e}");
        }
    }

    /// Issue 32: `PIPECAST_MULTICAST` is parsed like the others; `PIPECAST_TREE=multicast`
    /// turns the carrier on unless it is off by name (then it is a settings error).
    #[test]
    fn tcp_rto_min_parses_and_rejects() {
        use crate::transport::tcp::timers::RTO_MIN;
        let apply = |text: &str| {
            let mut c = Config::default();
            Settings::parse_assignments(text)
                .unwrap()
                .apply(&mut c)
                .map(|()| c.tcp_rto_min)
        };
        assert_eq!(Config::default().tcp_rto_min, None);
        assert_eq!(apply("").unwrap(), None);
        assert_eq!(apply("PIPECAST_TCP_RTO_MIN_US=0").unwrap(), None);
        assert_eq!(
            apply("PIPECAST_TCP_RTO_MIN_US=5000").unwrap(),
            Some(RTO_MIN)
        );
        assert_eq!(
            apply("PIPECAST_TCP_RTO_MIN_US= 12000 ").unwrap(),
            Some(Duration::from_millis(12))
        );
        assert_eq!(
            apply("PIPECAST_TCP_RTO_MIN_US=200000").unwrap(),
            Some(Duration::from_millis(200))
        );
        for bad in ["200001", "-1", "5ms", "1e4", "x", "99999999999999999999"] {
            let e = apply(&format!("PIPECAST_TCP_RTO_MIN_US={bad}")).unwrap_err();
            let e = e.to_string();
            assert!(e.contains("PIPECAST_TCP_RTO_MIN_US"), "{bad}: {e}");
            assert!(e.contains("microseconds"), "{bad}: {e}");
        }
    }

    #[test]
    fn multicast_settings() {
        use super::super::config::MulticastMode;
        let applied = |text: &str| {
            let mut c = Config::default();
            Settings::parse_assignments(text)
                .unwrap()
                .apply(&mut c)
                .map(|()| c.multicast)
                .map_err(|e| e.to_string())
        };
        assert_eq!(applied(""), Ok(MulticastMode::Off));
        assert_eq!(applied("PIPECAST_TREE=multicast"), Ok(MulticastMode::Auto));
        assert_eq!(applied("PIPECAST_MULTICAST= udp "), Ok(MulticastMode::Udp));
        assert_eq!(applied("PIPECAST_MULTICAST=auto"), Ok(MulticastMode::Auto));
        assert_eq!(
            applied("PIPECAST_MULTICAST=ether"),
            Ok(MulticastMode::Ether)
        );
        for bad in [
            "PIPECAST_MULTICAST=yes",
            "PIPECAST_TREE=multicast;PIPECAST_MULTICAST=off",
        ] {
            let e = applied(bad).unwrap_err();
            assert!(
                e.contains("PIPECAST_MULTICAST") || e.contains("PIPECAST_TREE"),
                "{bad}: {e}"
            );
        }
        let t = crate::topology::Topology::single_switch(4);
        let mc = Algorithm::Tree(crate::plan::TreeKind::Multicast);
        let (lanes, _) = super::super::algorithm::schedule(&t, 0, &mc, 1).unwrap();
        assert_eq!(lanes.len(), 1, "the ack tree");
    }

    /// One parser, one behaviour: blanks around a value are ignored wherever it comes from
    /// (the C API's own parser once refused `PIPECAST_TIMEOUT_MS=" 5000"`).
    #[test]
    fn values_as_every_path_reads_them() {
        let s = Settings::parse_assignments(
            "PIPECAST_TIMEOUT_MS= 5000 ;PIPECAST_IO_URING= 0;PIPECAST_MACHINE= node7 ",
        )
        .unwrap();
        let mut c = Config::default();
        s.apply(&mut c).unwrap();
        assert_eq!(c.timeout, Duration::from_millis(5000));
        assert!(!c.io_uring);
        assert_eq!(c.machine.as_deref(), Some("node7"));
        let mut c = Config::default();
        Settings::default().apply(&mut c).unwrap();
        assert!(c.io_uring && c.machine.is_none());
        assert_eq!(
            Settings::default().input_limit().unwrap(),
            crate::input::DEFAULT_MAX_INPUT_BYTES
        );
    }

    #[test]
    fn a_job_is_all_three_variables_or_none() {
        assert_eq!(Job::parse(None, Some("2"), None).unwrap(), None);
        assert_eq!(
            Job::parse(Some(" 1"), Some("2 "), Some("h:7000")).unwrap(),
            Some(Job {
                rank: 1,
                size: 2,
                rendezvous: "h:7000".into()
            })
        );
        for (rank, size, rendezvous, says) in [
            ("1", None, Some("h:1"), "PIPECAST_SIZE: not set"),
            ("1", Some("2"), None, "PIPECAST_RENDEZVOUS: not set"),
            ("one", Some("2"), Some("h:1"), "PIPECAST_RANK: \"one\""),
            ("1", Some("-2"), Some("h:1"), "PIPECAST_SIZE: \"-2\""),
            ("2", Some("2"), Some("h:1"), "PIPECAST_RANK: 2 is not below"),
        ] {
            let e = Job::parse(Some(rank), size, rendezvous)
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{e}");
        }
    }

    /// The glue's settings read as the others are (blanks ignored, byte sizes with K/M/G), with
    /// their bounds; a bad one keeps its default, names the variable and leaves the rest read.
    #[test]
    fn glue_settings_are_read_and_bounded() {
        let read = |pairs: &[(&str, &str)]| {
            let pairs: Vec<(String, String)> = pairs
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect();
            GlueSettings::read(move |name| {
                pairs
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| v.clone())
            })
        };
        let (s, verbose, ok) = read(&[]);
        assert_eq!((s, verbose), (GlueSettings::default(), 0));
        assert!(ok.is_ok());
        let (s, verbose, ok) = read(&[
            ("PIPECAST_MIN_BYTES", " 1 "),
            ("PIPECAST_PML_BELOW", "1M"),
            ("PIPECAST_PML_SEGMENT", "0"),
            ("PIPECAST_PML_WINDOW", "16"),
            ("PIPECAST_VERBOSE", " 42"),
        ]);
        assert!(ok.is_ok());
        assert_eq!(
            (s, verbose),
            (
                GlueSettings {
                    min_bytes: 1,
                    pml_below: 1 << 20,
                    pml_segment: 0,
                    pml_window: 16
                },
                GLUE_VERBOSE_MAX
            )
        );
        for (name, value) in [
            ("PIPECAST_MIN_BYTES", "-1"),
            ("PIPECAST_MIN_BYTES", "9223372036854775808"),
            ("PIPECAST_PML_BELOW", "lots"),
            ("PIPECAST_PML_SEGMENT", "2G"),
            ("PIPECAST_PML_WINDOW", "0"),
            ("PIPECAST_PML_WINDOW", "17"),
            ("PIPECAST_PML_WINDOW", "4K"),
            ("PIPECAST_VERBOSE", "loud"),
        ] {
            let (s, verbose, e) = read(&[(name, value), ("PIPECAST_VERBOSE", "1")]);
            let e = e.unwrap_err().to_string();
            assert!(e.contains(name) && e.contains(value), "{name}={value}: {e}");
            if name != "PIPECAST_VERBOSE" {
                // The rank still says why at its verbosity; the bad value keeps its default.
                assert_eq!((s, verbose), (GlueSettings::default(), 1), "{name}={value}");
            }
        }
        let (s, _, e) = read(&[("PIPECAST_PML_BELOW", "x"), ("PIPECAST_MIN_BYTES", "7")]);
        assert!(e.unwrap_err().to_string().contains("PIPECAST_PML_BELOW"));
        assert_eq!(s.min_bytes, 7);
        assert_eq!(
            GlueSettings::check(65536, 524288, 16384, 4),
            Ok(GlueSettings::default())
        );
        for (args, says) in [
            ((-1, 0, 0, 4), "must be from 0"),
            ((0, 0, 1 << 31, 4), "pml_segment 2147483648"),
            ((0, 0, 0, 0), "pml_window 0 is not from 1 to 16"),
            ((0, 0, 0, 17), "pml_window 17"),
        ] {
            let e = GlueSettings::check(args.0, args.1, args.2, args.3).unwrap_err();
            assert!(e.contains(says), "{args:?}: {e}");
        }
    }
}
