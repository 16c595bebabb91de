//! Topology discovery: the network of seed 000 §3 (`../shared/seeds/000_4ae1cf15394cd769.txt`)
//! learned from the network itself instead of written by hand.
//!
//! Each rank makes an [`Observation`]: the switch and port its NIC is plugged into, read from
//! the host's lldpd if one runs, else from one LLDPDU heard on the wire. The ranks share their
//! observations (a small allgather; the `pipecast topo discover` command uses the communicator's
//! TCP rendezvous) and [`assemble`] joins them with a
//! switch layer — lldpd neighbour dumps of the switches, a Slurm `topology.conf`, or a topology
//! file — into a [`Topology`] with machines in rank order.
//!
//! Everything here is pure: it takes text already read. Reading the files, asking lldpd and
//! listening on the wire is the `pipecast topo discover` command's (`src/bin/pipecast/`).

use super::lldpd::{self, LldpdError, Neighbor};
use super::slurm::{SlurmError, SlurmTopology};
use super::{Link, Machine, Nic, Switch, Topology, TopologyError};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap, HashSet};

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
    /// The machine's NICs 1, 2, … (rails 1, 2, …; the fields above are NIC 0's), each
    /// observed the same way. Absent from observations of one-NIC machines.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rails: Vec<NicObservation>,
}

/// What one rank learned about one of its NICs beyond the first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NicObservation {
    pub switch: Option<String>,
    pub port: Option<String>,
    pub interface: Option<String>,
    pub mac: Option<String>,
}

impl From<Observation> for NicObservation {
    fn from(o: Observation) -> NicObservation {
        NicObservation {
            switch: o.switch,
            port: o.port,
            interface: o.interface,
            mac: o.mac,
        }
    }
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
    // The switch the layer places each machine under (the first listing wins), and the
    // layer's switch names: hash lookups, so that 100k ranks take a fraction of a second.
    let mut placed: HashMap<&str, &str> = HashMap::new();
    match layer {
        SwitchLayer::Slurm(s) => {
            for sw in &s.switches {
                for n in &sw.nodes {
                    placed.entry(n.as_str()).or_insert(sw.name.as_str());
                }
            }
        }
        SwitchLayer::File(t) => {
            for m in t.machines() {
                let switch = t.switches()[m.switch].name.as_str();
                placed.entry(m.name.as_str()).or_insert(switch);
            }
        }
        _ => {}
    }
    let listed: HashSet<String> = names.iter().cloned().collect();
    // Each rank's switch: what it heard, else what the layer says (NIC 0; the layer knows
    // NIC 0 only, so a rail NIC must have heard LLDP).
    let mut attached = Vec::with_capacity(observations.len());
    let mut rails: Vec<Vec<String>> = Vec::with_capacity(observations.len());
    // A switch the given layer does not list.
    let unlisted = |rank: usize, machine: &str, switch: &String| {
        (layer_given && !listed.contains(switch)).then(|| DiscoverError::UnknownSwitch {
            rank,
            machine: machine.to_string(),
            switch: switch.clone(),
            known: names.join(", "),
        })
    };
    for (rank, o) in observations.iter().enumerate() {
        let mut mine = Vec::with_capacity(o.rails.len());
        for nic in &o.rails {
            let Some(switch) = nic.switch.clone() else {
                return Err(DiscoverError::Unplaced {
                    rank,
                    machine: format!("{}, NIC {}", o.machine, mine.len() + 1),
                });
            };
            if let Some(e) = unlisted(rank, &o.machine, &switch) {
                return Err(e);
            }
            mine.push(switch);
        }
        rails.push(mine);
        let from_layer = placed.get(o.machine.as_str()).map(|s| s.to_string());
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
        if let Some(e) = unlisted(rank, &o.machine, &switch) {
            return Err(e);
        }
        attached.push(switch);
    }
    let mut pairs = pairs;
    if !layer_given {
        // One star per rail (rail 0 is NIC 0's switches), each switch in the first rail
        // that reaches it.
        let rail_count = rails.iter().map(Vec::len).max().unwrap_or(0) + 1;
        let mut all: Vec<String> = Vec::new();
        for rail in 0..rail_count {
            let mut seen: Vec<String> = if rail == 0 {
                attached.clone()
            } else {
                rails
                    .iter()
                    .filter_map(|r| r.get(rail - 1).cloned())
                    .collect()
            };
            seen.sort_by(|a, b| natural_cmp(a, b));
            seen.dedup();
            let new: Vec<String> = seen.iter().filter(|s| !all.contains(s)).cloned().collect();
            if seen.len() > 1 {
                let on = if rail == 0 {
                    String::new()
                } else {
                    format!(" on rail {rail}")
                };
                notes.push(format!(
                    "the ranks are attached{on} to {} switches ({}) but no switch-layer source was given \
                     (--switch-lldp DIR, --slurm FILE or --topology FILE): ASSUMING every switch is \
                     linked directly to {} (a star); give a source for the real links",
                    seen.len(),
                    seen.join(", "),
                    seen[0]
                ));
                pairs.extend(
                    new.iter()
                        .filter(|s| **s != seen[0])
                        .map(|s| (seen[0].clone(), s.clone(), None)),
                );
            }
            all.extend(new);
        }
        names = all;
    }
    let mut by_name = HashMap::with_capacity(names.len());
    for (i, n) in names.iter().enumerate() {
        by_name.entry(n.as_str()).or_insert(i);
    }
    let index = |name: &str| by_name.get(name).copied();
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
        .zip(attached.iter().zip(&rails))
        .map(|(o, (s, nics))| Machine {
            port: o.port.clone(),
            mac: o.mac.clone(),
            rails: o
                .rails
                .iter()
                .zip(nics)
                .map(|(nic, s)| Nic {
                    switch: index(s).expect("rail switches are listed"),
                    mac: nic.mac.clone(),
                    port: nic.port.clone(),
                })
                .collect(),
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

/// One switch's lldpd neighbour table as read (`lldpcli -f json0 show neighbors`).
#[derive(Debug, Clone)]
pub struct LldpDump {
    /// The switch's name (`pipecast lab lldp` names each file `<switch>.json`).
    pub switch: String,
    /// Where the text came from, for messages (a file path).
    pub path: String,
    pub text: String,
}

/// The switch layer of the lldpd dumps of a directory `dir` (named in messages), in the order
/// given.
pub fn parse_switch_lldp(dir: &str, dumps: &[LldpDump]) -> Result<SwitchLayer, DiscoverError> {
    if dumps.is_empty() {
        return Err(DiscoverError::EmptyDir(dir.to_string()));
    }
    let mut layer = Vec::with_capacity(dumps.len());
    for dump in dumps {
        let neighbours =
            lldpd::parse_neighbors(&dump.text).map_err(|source| DiscoverError::Lldpd {
                path: dump.path.clone(),
                source,
            })?;
        layer.push((dump.switch.clone(), neighbours));
    }
    Ok(SwitchLayer::Lldp(layer))
}

/// The switch layer of a Slurm topology.conf read from `path` (named in messages).
pub fn parse_slurm_layer(path: &str, text: &str) -> Result<SwitchLayer, DiscoverError> {
    super::slurm::parse_slurm_topology(text)
        .map(SwitchLayer::Slurm)
        .map_err(|source| DiscoverError::Slurm {
            path: path.to_string(),
            source,
        })
}

impl Observation {
    /// A machine that heard no LLDP: the switch layer must place it.
    pub fn unheard(machine: &str) -> Observation {
        Observation {
            machine: machine.into(),
            switch: None,
            port: None,
            interface: None,
            mac: None,
            source: "none".into(),
            rails: Vec::new(),
        }
    }
}

/// A machine's observation from its own lldpd's neighbour table (`lldpcli -f json0 show
/// neighbors`): the first neighbour on `iface` (default: any interface) that `is_local` accepts
/// (the lldpd asked may serve another network namespace). `mac` is left for the caller, which
/// can read the interface's address. `None` when the text is unreadable or no neighbour fits.
pub fn lldpd_observation(
    machine: &str,
    neighbours_json: &str,
    iface: Option<&str>,
    is_local: impl Fn(&str) -> bool,
) -> Option<Observation> {
    let n = lldpd::parse_neighbors(neighbours_json)
        .ok()?
        .into_iter()
        .filter(|n| iface.is_none_or(|only| n.interface == only))
        .find(|n| is_local(&n.interface))?;
    Some(Observation {
        machine: machine.into(),
        switch: Some(n.chassis_name()),
        port: Some(n.port_id.clone()),
        mac: None,
        interface: Some(n.interface),
        source: "lldpd".into(),
        rails: Vec::new(),
    })
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
            rails: Vec::new(),
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
    fn every_nic_is_placed_on_the_switch_it_heard() {
        let two = |m: &str, a: &str, b: Option<&str>| Observation {
            rails: vec![NicObservation {
                switch: b.map(str::to_string),
                port: Some(format!("{m}-b")),
                interface: Some("eth1".into()),
                mac: None,
            }],
            ..obs(m, Some(a))
        };
        // No switch layer: one assumed star per rail.
        let o = [two("n0", "a0", Some("b0")), two("n1", "a1", Some("b1"))];
        let d = assemble(&o, &SwitchLayer::None).unwrap();
        let t = &d.topology;
        assert_eq!(t.rails(), 2);
        assert_eq!(t.switches()[t.nic_switch(1, 1)].name, "b1");
        assert_eq!(t.machines()[1].rails[0].port.as_deref(), Some("n1-b"));
        assert_eq!(t.links().len(), 2);
        assert!(
            d.notes.iter().any(|n| n.contains("on rail 1")),
            "{:?}",
            d.notes
        );
        // Observations travel as JSON; one-NIC ones keep their old shape.
        let text = serde_json::to_string(&o[0]).unwrap();
        assert_eq!(serde_json::from_str::<Observation>(&text).unwrap(), o[0]);
        assert!(!serde_json::to_string(&obs("n0", None))
            .unwrap()
            .contains("rails"));
        // A rail NIC that heard nothing is named.
        let e = assemble(&[two("n0", "a0", None)], &SwitchLayer::None).unwrap_err();
        assert!(e.to_string().contains("n0, NIC 1"), "{e}");
        // A switch layer must list the rail switches too.
        let layer = SwitchLayer::Lldp(vec![("a0".into(), Vec::new())]);
        let e = assemble(&[two("n0", "a0", Some("b7"))], &layer).unwrap_err();
        assert!(e.to_string().contains("b7"), "{e}");
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

    /// A host's `lldpcli -f json0 show neighbors`: switch s1 on eth0, switch s2 on veth9.
    const HOST: &str = r#"{"lldp": [{"interface": [
      {"name": "veth9", "chassis": [{"id": [{"type": "local", "value": "s2"}], "name": [{"value": "s2"}]}],
       "port": [{"id": [{"type": "ifname", "value": "p7"}]}]},
      {"name": "eth0", "chassis": [{"id": [{"type": "local", "value": "s1"}], "name": [{"value": "s1"}]}],
       "port": [{"id": [{"type": "ifname", "value": "p3"}]}]}
    ]}]}"#;

    #[test]
    fn lldpd_observation_keeps_local_interfaces_only() {
        let o = lldpd_observation("n0", HOST, None, |i| i == "eth0").unwrap();
        assert_eq!(o.switch.as_deref(), Some("s1"));
        assert_eq!(o.port.as_deref(), Some("p3"));
        assert_eq!(
            (o.interface.as_deref(), o.source.as_str()),
            (Some("eth0"), "lldpd")
        );
        let first = lldpd_observation("n0", HOST, None, |_| true).unwrap();
        assert_eq!(first.switch.as_deref(), Some("s2"));
        assert!(lldpd_observation("n0", HOST, Some("eth1"), |_| true).is_none());
        assert!(lldpd_observation("n0", "not json", None, |_| true).is_none());
        assert_eq!(Observation::unheard("n0").source, "none");
    }

    #[test]
    fn switch_dumps_and_slurm_text_become_layers_or_name_the_file() {
        let dump = |switch: &str, text: &str| LldpDump {
            switch: switch.into(),
            path: format!("d/{switch}.json"),
            text: text.into(),
        };
        let layer = parse_switch_lldp("d", &[dump("s0", HOST), dump("s1", HOST)]).unwrap();
        let SwitchLayer::Lldp(dumps) = layer else {
            panic!("not an lldp layer")
        };
        assert_eq!((dumps[1].0.as_str(), dumps[1].1.len()), ("s1", 2));
        let e = parse_switch_lldp("d", &[]).unwrap_err().to_string();
        assert!(e.starts_with("d holds no *.json"), "{e}");
        let e = parse_switch_lldp("d", &[dump("s3", "{}")])
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("d/s3.json: "), "{e}");
        let e = parse_slurm_layer("t.conf", "SwitchName=").unwrap_err();
        assert!(e.to_string().starts_with("t.conf: "), "{e}");
        assert!(matches!(
            parse_slurm_layer("t.conf", "SwitchName=s0 Nodes=n0\n"),
            Ok(SwitchLayer::Slurm(_))
        ));
    }
}
