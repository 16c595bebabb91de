//! Every environment variable pipecast reads, read here and nowhere else: the `PIPECAST_*`
//! settings of a communicator ([`Settings`]) for the tool
//! ([`Comm::from_env`](super::Comm::from_env)), the C API and the MPI glue
//! (`pipecast_comm_create`, `pipecast_config_from_env`), parsed into a [`Config`] by one
//! function; a job's place ([`Job`]); the tracing filter ([`log_filter`]); the input size limit
//! of the tool's files ([`max_input_bytes`]); the cache directory ([`cache_home`]). The links
//! and the rest of the crate receive what they need as values.
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
    /// `PIPECAST_IO_URING`: 0 moves TCP data with plain `sendmsg`/`readv`, 1 (the default)
    /// through io_uring where the kernel offers it (every rank the same).
    pub io_uring: Option<String>,
    /// `PIPECAST_MACHINE`: this rank's host identity (default: the kernel's host name).
    pub machine: Option<String>,
    /// `PIPECAST_MAX_INPUT_BYTES`: the largest topology or profile file read
    /// ([`crate::input::max_input_bytes`]).
    pub max_input_bytes: Option<String>,
}

/// The variables, in the order errors and documentation list them.
pub const VARIABLES: [&str; 23] = [
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
    "PIPECAST_IO_URING",
    "PIPECAST_MACHINE",
    "PIPECAST_MAX_INPUT_BYTES",
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
            &mut self.io_uring,
            &mut self.machine,
            &mut self.max_input_bytes,
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
        if let Some(v) = &self.verbs_max_qps {
            let most = crate::transport::verbs::MAX_QPS_LIMIT;
            config.verbs_max_qps = v
                .trim()
                .parse()
                .ok()
                .filter(|n| (1..=most).contains(n))
                .ok_or_else(|| {
                    bad(
                        "PIPECAST_VERBS_MAX_QPS",
                        format!("{v:?}: expected a whole number of queue pairs from 1 to {most}"),
                    )
                })?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignments_as_the_glue_writes_them() {
        let s = Settings::parse_assignments(
            "PIPECAST_VERBS_DEVICE=mlx5_0\nPIPECAST_VERBS_PORT = 2; PIPECAST_VERBS_GID_INDEX=3;;\n PIPECAST_TREE=;PIPECAST_VERBS_MAX_QPS=8",
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
        .chain(["0", "-1", "many", "1000000"].map(|v| format!("PIPECAST_VERBS_MAX_QPS={v}")));
        for text in bad {
            let name = text.split('=').next().unwrap();
            let s = Settings::parse_assignments(&text).unwrap();
            let e = s.apply(&mut Config::default()).unwrap_err().to_string();
            assert!(e.contains(name), "{text}: {e}");
        }
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
}
