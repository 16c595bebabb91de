//! Topology discovery: the network of seed 000 §3 (`../shared/seeds/000_4ae1cf15394cd769.txt`)
//! learned from the network itself instead of written by hand.
//!
//! Each rank makes an [`Observation`]: the switch and port its NIC is plugged into, read from
//! the host's lldpd if one runs, else from one LLDPDU heard on the wire. The ranks share their
//! observations (a small allgather; the `pipecast topo discover` command uses the communicator's
//! TCP rendezvous) and [`assemble`] joins them with a
//! switch layer — lldpd neighbour dumps of the switches, a Slurm `topology.conf`, or a topology
//! file — into a [`Topology`] with machines in rank order.

use super::lldpd::{self, LldpdError, Neighbor};
use super::slurm::{SlurmError, SlurmTopology};
use super::{Link, Machine, Switch, Topology, TopologyError};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

/// What one rank learned about its own attachment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observation {
    /// The machine's name (`PIPECAST_MACHINE`, else the host name).
    pub machine: String,
    /// The switch its NIC is plugged into (LLDP system name, else chassis ID).
    pub switch: Option<String>,
    /// The switch port (LLDP port ID).
    pub port: Option<String>,
    /// The local interface LLDP was heard on, and its MAC.
    pub interface: Option<String>,
    pub mac: Option<String>,
    /// Where the observation came from (`lldpd`, `listen`, or `none`).
    pub source: String,
}

/// The switch tree, from one of the supported sources.
#[derive(Debug, Clone)]
pub enum SwitchLayer {
    /// Each switch's lldpd neighbour table: (switch name, neighbours).
    Lldp(Vec<(String, Vec<Neighbor>)>),
    Slurm(SlurmTopology),
    File(Topology),
    /// No source: fine for one switch; for several, an assumption is made and noted.
    None,
}

/// A discovered topology and what the reader should know about how it was made.
#[derive(Debug, Clone)]
pub struct Discovered {
    pub topology: Topology,
    /// Assumptions and ignored data, one sentence each.
    pub notes: Vec<String>,
}

/// What went wrong discovering the topology.
#[derive(Debug, thiserror::Error)]
pub enum DiscoverError {
    #[error("{path}: {source}")]
    Lldpd {
        path: String,
        #[source]
        source: LldpdError,
    },
    #[error("{path}: {source}")]
    Slurm {
        path: String,
        #[source]
        source: SlurmError,
    },
    #[error("cannot read {path}: {reason}")]
    Io { path: String, reason: String },
    #[error("{0} holds no *.json lldpd dumps: write them with `pipecast lab lldp --out DIR` or `lldpcli -f json0 show neighbors > DIR/<switch>.json`")]
    EmptyDir(String),
    #[error("rank {rank} ({machine}) heard no LLDP and the switch layer does not place it: run lldpd on the switches (and wait one LLDP interval), or give --slurm/--topology listing {machine}")]
    Unplaced { rank: usize, machine: String },
    #[error("rank {rank} ({machine}) is attached to switch {switch}, which the switch layer does not list ({known}): give the dump/definition of {switch} too")]
    UnknownSwitch {
        rank: usize,
        machine: String,
        switch: String,
        known: String,
    },
    #[error("the discovered switch links are not a tree: {0}")]
    Invalid(#[from] TopologyError),
    #[error("cannot listen for LLDP: {0} (needs root or CAP_NET_RAW)")]
    Listen(String),
    #[error("rank {rank} sent an unreadable observation: {reason}")]
    BadObservation { rank: usize, reason: String },
}

/// Orders names the way people number switches: `s2` before `s10`.
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    fn chunks(s: &str) -> Vec<(bool, &str)> {
        let mut out = Vec::new();
        let mut start = 0;
        let bytes = s.as_bytes();
        for i in 1..=bytes.len() {
            if i == bytes.len() || bytes[i].is_ascii_digit() != bytes[start].is_ascii_digit() {
                out.push((bytes[start].is_ascii_digit(), &s[start..i]));
                start = i;
            }
        }
        out
    }
    let (ca, cb) = (chunks(a), chunks(b));
    for (x, y) in ca.iter().zip(&cb) {
        let ord = match (x, y) {
            ((true, p), (true, q)) => {
                let (p, q) = (p.trim_start_matches('0'), q.trim_start_matches('0'));
                p.len().cmp(&q.len()).then(p.cmp(q))
            }
            ((_, p), (_, q)) => p.cmp(q),
        };
        if ord != Ordering::Equal {
            return ord;
        }
    }
    ca.len().cmp(&cb.len()).then(a.cmp(b))
}

/// A switch link by end names, with its optional bandwidth.
type NamedLink = (String, String, Option<f64>);

/// Joins the ranks' observations (index = rank) and a switch layer into a topology.
pub fn assemble(
    observations: &[Observation],
    layer: &SwitchLayer,
) -> Result<Discovered, DiscoverError> {
    let mut notes = Vec::new();
    // Switches in a deterministic order, and the layer's links as name pairs.
    let (mut names, pairs): (Vec<String>, Vec<NamedLink>) = match layer {
        SwitchLayer::Lldp(dumps) => {
            let mut names: Vec<String> = dumps.iter().map(|(s, _)| s.clone()).collect();
            names.sort_by(|a, b| natural_cmp(a, b));
            let known: BTreeSet<&str> = names.iter().map(String::as_str).collect();
            let mut pairs = BTreeSet::new();
            let mut ignored = Vec::new();
            for (switch, neighbours) in dumps {
                for n in neighbours {
                    let other = n.chassis_name();
                    if known.contains(other.as_str()) {
                        let (a, b) = if natural_cmp(switch, &other) == Ordering::Greater {
                            (other.clone(), switch.clone())
                        } else {
                            (switch.clone(), other.clone())
                        };
                        if a != b {
                            pairs.insert((a, b));
                        }
                    } else {
                        ignored.push(format!("{other} (on {switch} port {})", n.interface));
                    }
                }
            }
            if !ignored.is_empty() {
                let shown = ignored.len().min(5);
                notes.push(format!(
                    "{} LLDP neighbour(s) of the switches have no dump of their own and are not \
                     taken as switches: {}{}",
                    ignored.len(),
                    ignored[..shown].join(", "),
                    if ignored.len() > shown { ", …" } else { "" }
                ));
            }
            let mut pairs: Vec<(String, String)> = pairs.into_iter().collect();
            pairs.sort_by(|x, y| natural_cmp(&x.0, &y.0).then(natural_cmp(&x.1, &y.1)));
            (
                names,
                pairs.into_iter().map(|(a, b)| (a, b, None)).collect(),
            )
        }
        SwitchLayer::Slurm(s) => (
            s.switches.iter().map(|s| s.name.clone()).collect(),
            s.links().into_iter().map(|(a, b)| (a, b, None)).collect(),
        ),
        SwitchLayer::File(t) => {
            let sw = |i: usize| t.switches()[i].name.clone();
            (
                t.switches().iter().map(|s| s.name.clone()).collect(),
                t.links()
                    .iter()
                    .map(|l| (sw(l.a), sw(l.b), l.gbps))
                    .collect(),
            )
        }
        SwitchLayer::None => (Vec::new(), Vec::new()),
    };
    let layer_given = !matches!(layer, SwitchLayer::None);
    // Each rank's switch: what it heard, else what the layer says.
    let mut attached = Vec::with_capacity(observations.len());
    for (rank, o) in observations.iter().enumerate() {
        let from_layer = match layer {
            SwitchLayer::Slurm(s) => s.switch_of(&o.machine).map(str::to_string),
            SwitchLayer::File(t) => t
                .machine_named(&o.machine)
                .map(|m| t.switches()[t.switch_of(m)].name.clone()),
            _ => None,
        };
        let switch = match (&o.switch, from_layer) {
            (Some(seen), Some(listed)) if *seen != listed => {
                notes.push(format!(
                    "rank {rank} ({}) hears LLDP from {seen} but the switch layer lists it under {listed}; using {seen}",
                    o.machine
                ));
                seen.clone()
            }
            (Some(seen), _) => seen.clone(),
            (None, Some(listed)) => listed,
            (None, None) => {
                return Err(DiscoverError::Unplaced {
                    rank,
                    machine: o.machine.clone(),
                })
            }
        };
        if layer_given && !names.contains(&switch) {
            return Err(DiscoverError::UnknownSwitch {
                rank,
                machine: o.machine.clone(),
                switch,
                known: names.join(", "),
            });
        }
        attached.push(switch);
    }
    let mut pairs = pairs;
    if !layer_given {
        let mut seen: Vec<String> = attached.clone();
        seen.sort_by(|a, b| natural_cmp(a, b));
        seen.dedup();
        if seen.len() > 1 {
            notes.push(format!(
                "the ranks are attached to {} switches ({}) but no switch-layer source was given \
                 (--switch-lldp DIR, --slurm FILE or --topology FILE): ASSUMING every switch is \
                 linked directly to {} (a star); give a source for the real links",
                seen.len(),
                seen.join(", "),
                seen[0]
            ));
            pairs = seen[1..]
                .iter()
                .map(|s| (seen[0].clone(), s.clone(), None))
                .collect();
        }
        names = seen;
    }
    let index = |name: &str| names.iter().position(|n| n == name);
    let mut links = Vec::with_capacity(pairs.len());
    for (a, b, gbps) in &pairs {
        match (index(a), index(b)) {
            (Some(a), Some(b)) => links.push(Link { a, b, gbps: *gbps }),
            _ => {
                return Err(DiscoverError::Invalid(TopologyError::UnknownSwitch {
                    name: if index(a).is_none() {
                        a.clone()
                    } else {
                        b.clone()
                    },
                    context: format!("link {a}-{b}"),
                }))
            }
        }
    }
    let machines = observations
        .iter()
        .zip(&attached)
        .map(|(o, s)| Machine {
            port: o.port.clone(),
            mac: o.mac.clone(),
            ..Machine::new(
                o.machine.clone(),
                index(s).expect("attached switches are listed"),
            )
        })
        .collect();
    let switches = names.iter().map(|n| Switch { name: n.clone() }).collect();
    let topology = Topology::new(switches, links, machines)?;
    Ok(Discovered { topology, notes })
}

/// Reads a directory of lldpd dumps (`<switch>.json`, as `pipecast lab lldp` writes them).
pub fn read_switch_lldp(dir: &Path) -> Result<SwitchLayer, DiscoverError> {
    let io = |e: std::io::Error| DiscoverError::Io {
        path: dir.display().to_string(),
        reason: e.to_string(),
    };
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(io)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(DiscoverError::EmptyDir(dir.display().to_string()));
    }
    let mut dumps = Vec::new();
    for path in files {
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let text = std::fs::read_to_string(&path).map_err(|e| DiscoverError::Io {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        let neighbours = lldpd::parse_neighbors(&text).map_err(|source| DiscoverError::Lldpd {
            path: path.display().to_string(),
            source,
        })?;
        dumps.push((name, neighbours));
    }
    Ok(SwitchLayer::Lldp(dumps))
}

/// Reads a Slurm topology.conf.
pub fn read_slurm(path: &Path) -> Result<SwitchLayer, DiscoverError> {
    let text = std::fs::read_to_string(path).map_err(|e| DiscoverError::Io {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    super::slurm::parse_slurm_topology(&text)
        .map(SwitchLayer::Slurm)
        .map_err(|source| DiscoverError::Slurm {
            path: path.display().to_string(),
            source,
        })
}

fn interface_mac(iface: &str) -> Option<String> {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/address"))
        .ok()
        .map(|s| s.trim().to_string())
}

/// lldpd's default control socket.
pub const LLDPD_SOCKET: &str = "/run/lldpd.socket";

/// Asks the host's own lldpd through its control socket (default [`LLDPD_SOCKET`]), if it
/// runs, about `iface` (default: any interface). Only neighbours on interfaces of this network namespace count (the socket path may
/// reach another namespace's lldpd).
pub fn observe_with_lldpd(
    machine: &str,
    socket: Option<&Path>,
    iface: Option<&str>,
) -> Option<Observation> {
    let socket = socket.unwrap_or(Path::new(LLDPD_SOCKET));
    if !socket.exists() {
        return None;
    }
    let out = std::process::Command::new("lldpcli")
        .arg("-u")
        .arg(socket)
        .args(["-f", "json0", "show", "neighbors"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let neighbours = lldpd::parse_neighbors(&String::from_utf8_lossy(&out.stdout)).ok()?;
    let n = neighbours
        .into_iter()
        .filter(|n| iface.is_none_or(|only| n.interface == only))
        .find(|n| Path::new("/sys/class/net").join(&n.interface).exists())?;
    Some(Observation {
        machine: machine.into(),
        switch: Some(n.chassis_name()),
        port: Some(n.port_id.clone()),
        mac: interface_mac(&n.interface),
        interface: Some(n.interface),
        source: "lldpd".into(),
    })
}

/// Listens on `iface` (or every Ethernet interface that is up) for up to `timeout` and takes
/// the first valid LLDPDU (one LLDP interval is enough: 30 s by default, 1 s in the lab).
pub fn observe_by_listening(
    machine: &str,
    timeout: Duration,
    iface: Option<&str>,
) -> Result<Observation, DiscoverError> {
    use crate::transport::lldp_socket::{ethernet_interfaces, LldpSocket};
    use crate::wire::lldp;
    let mut interfaces = ethernet_interfaces();
    if let Some(only) = iface {
        interfaces.retain(|(name, _)| name == only);
        if interfaces.is_empty() {
            return Err(DiscoverError::Listen(format!(
                "interface {only} is not an Ethernet interface that is up here"
            )));
        }
    }
    let indexes: Vec<u32> = interfaces.iter().map(|(_, i)| *i).collect();
    let socket = LldpSocket::open(&indexes).map_err(|e| DiscoverError::Listen(e.to_string()))?;
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let Some(rx) = socket
            .recv(left)
            .map_err(|e| DiscoverError::Listen(e.to_string()))?
        else {
            return Ok(Observation {
                machine: machine.into(),
                switch: None,
                port: None,
                interface: None,
                mac: None,
                source: "none".into(),
            });
        };
        let Ok((_, repr)) = lldp::parse_frame(&rx.frame) else {
            tracing::debug!("ignoring a malformed LLDP frame");
            continue;
        };
        // The socket hears every interface; keep only the chosen ones.
        let Some(iface) = interfaces
            .iter()
            .find(|(_, i)| *i == rx.ifindex)
            .map(|(n, _)| n.clone())
        else {
            continue;
        };
        let iface = Some(iface);
        return Ok(Observation {
            machine: machine.into(),
            switch: Some(repr.switch_name()),
            port: Some(repr.port_text()),
            mac: iface.as_deref().and_then(interface_mac),
            interface: iface,
            source: "listen".into(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::slurm::parse_slurm_topology;

    fn obs(machine: &str, switch: Option<&str>) -> Observation {
        Observation {
            machine: machine.into(),
            switch: switch.map(str::to_string),
            port: Some(machine.into()),
            interface: Some("eth0".into()),
            mac: None,
            source: "listen".into(),
        }
    }

    fn neighbour(interface: &str, chassis: &str) -> Neighbor {
        Neighbor {
            interface: interface.into(),
            chassis_id: chassis.into(),
            system_name: Some(chassis.into()),
            port_id: "x".into(),
            port_description: None,
            bridge: true,
        }
    }

    #[test]
    fn natural_order() {
        let mut v = vec!["s10", "s2", "s1", "a", "s02x"];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(v, ["a", "s1", "s2", "s02x", "s10"]);
    }

    #[test]
    fn lldp_layer_builds_the_tree() {
        let layer = SwitchLayer::Lldp(vec![
            ("s1".into(), vec![neighbour("s0", "s0")]),
            (
                "s0".into(),
                vec![neighbour("s1", "s1"), neighbour("s2", "s2")],
            ),
            (
                "s2".into(),
                vec![neighbour("s0", "s0"), neighbour("h9", "somehost")],
            ),
        ]);
        let o = [
            obs("n0", Some("s2")),
            obs("n1", Some("s0")),
            obs("n2", Some("s1")),
        ];
        let d = assemble(&o, &layer).unwrap();
        let t = &d.topology;
        let names: Vec<&str> = t.switches().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["s0", "s1", "s2"]);
        assert_eq!(t.links().len(), 2);
        assert_eq!(t.switches()[t.switch_of(0)].name, "s2");
        assert_eq!(t.machines()[2].name, "n2");
        assert!(
            d.notes.iter().any(|n| n.contains("somehost")),
            "{:?}",
            d.notes
        );
    }

    #[test]
    fn missing_layer_is_stated_as_an_assumption() {
        let o = [obs("n0", Some("s1")), obs("n1", Some("s0"))];
        let d = assemble(&o, &SwitchLayer::None).unwrap();
        assert_eq!(d.topology.links().len(), 1);
        assert!(d.notes[0].contains("ASSUMING"), "{:?}", d.notes);
        let single = assemble(&[obs("n0", Some("s0"))], &SwitchLayer::None).unwrap();
        assert!(single.notes.is_empty());
    }

    #[test]
    fn slurm_places_silent_ranks_and_errors_name_the_culprit() {
        let layer = SwitchLayer::Slurm(
            parse_slurm_topology("SwitchName=s0 Switches=s1\nSwitchName=s1 Nodes=n[0-1]\n")
                .unwrap(),
        );
        let d = assemble(&[obs("n0", None), obs("n1", Some("s1"))], &layer).unwrap();
        assert_eq!(d.topology.switch_of(0), 1);
        let e = assemble(&[obs("n7", None)], &layer)
            .unwrap_err()
            .to_string();
        assert!(e.contains("rank 0 (n7)"), "{e}");
        let e = assemble(&[obs("n0", Some("s9"))], &layer)
            .unwrap_err()
            .to_string();
        assert!(e.contains("s9") && e.contains("s0, s1"), "{e}");
    }

    #[test]
    fn cycles_in_lldp_dumps_are_reported() {
        let layer = SwitchLayer::Lldp(vec![
            (
                "s0".into(),
                vec![neighbour("s1", "s1"), neighbour("s2", "s2")],
            ),
            ("s1".into(), vec![neighbour("s2", "s2")]),
            ("s2".into(), vec![]),
        ]);
        let e = assemble(&[obs("n0", Some("s0"))], &layer)
            .unwrap_err()
            .to_string();
        assert!(e.contains("cycle"), "{e}");
    }
}
