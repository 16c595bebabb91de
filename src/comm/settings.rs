//! Every `PIPECAST_*` setting of a communicator, read from the environment in one place for
//! the tool ([`Comm::from_env`](super::Comm::from_env)), the C API and the MPI glue
//! (`pipecast_comm_create`), and parsed into a [`Config`] by one function.
//!
//! Settings are kept as text until [`Settings::apply`]: a bad value is then an error that
//! names the variable, and the communicator reports it to every rank through the bootstrap
//! agreement instead of failing alone (a rank that fails alone hangs an MPI job).

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
}

/// The variables, in the order errors and documentation list them.
pub const VARIABLES: [&str; 20] = [
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
];

/// Longest text [`Settings::parse_assignments`] reads.
pub const MAX_ASSIGNMENTS: usize = 64 * 1024;

impl Settings {
    /// Reads the `PIPECAST_*` variables (empty ones count as unset).
    pub fn from_env() -> Settings {
        let get = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let mut s = Settings::default();
        for (name, slot) in VARIABLES.iter().zip(s.slots()) {
            *slot = get(name);
        }
        s
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

    fn slots(&mut self) -> [&mut Option<String>; 20] {
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
            let ms: u64 = v.trim().parse().ok().filter(|ms| *ms > 0).ok_or_else(|| {
                bad(
                    "PIPECAST_TIMEOUT_MS",
                    format!("{v:?}: expected milliseconds, at least 1"),
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
            config.profile = crate::input::load_profile(v)
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
                crate::input::read_topology(v.as_ref())
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
        ]
        .map(String::from)
        .into_iter()
        .chain(["0", "-1", "many", "1000000"].map(|v| format!("PIPECAST_VERBS_MAX_QPS={v}")));
        for text in bad {
            let name = text.split('=').next().unwrap();
            let s = Settings::parse_assignments(&text).unwrap();
            let e = s.apply(&mut Config::default()).unwrap_err().to_string();
            assert!(e.contains(name), "{text}: {e}");
        }
    }
}
