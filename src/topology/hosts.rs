//! Ranks sharing a host: the host becomes a switch, and plans become two-level.
//!
//! Several ranks on one host share its NIC: two of them sending off the host at once contend
//! on the NIC's uplink exactly as two machines behind one switch contend on the switch's
//! uplink (seed 000 §3, `../shared/seeds/000_4ae1cf15394cd769.txt`: contention is two
//! communications sharing a directed edge). So a host with several ranks becomes a switch of
//! its own — `host:NAME` — with one machine per rank behind it, and the NIC is the link from
//! that host switch to the physical switch ([`Hosts::rank_topology`]). Plans that are
//! contention-free on this topology are then contention-free on the NIC too.
//!
//! The resulting topology remembers the grouping ([`Topology::hosts`]): the planners build
//! two-level plans on it (`plan::two_level`: a tree between one leader per host on
//! [`Hosts::network`], one machine per host, and every other rank of a host fed by its leader
//! through memory). O(P²) in the number of ranks P for [`host_topology`], O(P) otherwise.

use super::{Link, Machine, MachineId, Switch, Topology, TopologyError};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Most ranks one machine may run (the file's `ranks`, `--ranks-per-machine`).
pub const MAX_RANKS_PER_MACHINE: usize = 1024;

/// Most ranks [`expand`] makes in all.
pub const MAX_RANKS: usize = 1 << 20;

/// How the ranks of one host reach each other, as far as planning cares (`plan::two_level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InHost {
    /// Through memory (the shared-memory link): every local rank reads the leader's buffer,
    /// so the leader's fan-out costs about one copy per rank, concurrently.
    #[default]
    Memory,
    /// Through sockets (loopback TCP: no shared memory between them). Every in-host edge is a
    /// connection, and a rank keeps at most `max_connections` of those it opens
    /// (`PIPECAST_MAX_CONNECTIONS`): a fan-out to more ranks than that would reopen
    /// connections at every broadcast, so such a host's ranks are fed by a tree
    /// ([`Hosts::tree_inside`]).
    Sockets { max_connections: usize },
}

/// Which ranks share a host (and so its NIC), and the network between the hosts.
///
/// Host h is machine h of [`Hosts::network`]; its link there is the host's NIC. Ranks are
/// numbered 0..[`Hosts::size`]; every host holds at least one.
#[derive(Debug, Clone)]
pub struct Hosts {
    network: Topology,
    host_of: Vec<usize>,
    ranks: Vec<Vec<MachineId>>,
    /// How each host's ranks reach each other ([`InHost::Memory`] unless told).
    in_host: Vec<InHost>,
}

impl Hosts {
    /// The grouping `host_of[r]` (rank r runs on host `host_of[r]`, a machine of `network`).
    /// Every machine of `network` must hold a rank. The network's machines get `ranks` = the
    /// number of ranks on them (a job may put more than a file's [`MAX_RANKS_PER_MACHINE`] on
    /// one host; that limit is for files and `--ranks-per-machine`).
    pub fn new(network: Topology, host_of: Vec<usize>) -> Result<Hosts, TopologyError> {
        let count = network.size();
        let mut ranks = vec![Vec::new(); count];
        for (r, &h) in host_of.iter().enumerate() {
            let list = ranks.get_mut(h).ok_or_else(|| {
                TopologyError::BadHosts(format!(
                    "rank {r} is on host {h}, but the network has {count} hosts"
                ))
            })?;
            list.push(r);
        }
        if let Some(h) = ranks.iter().position(Vec::is_empty) {
            return Err(TopologyError::BadHosts(format!(
                "host {} holds no rank",
                network.machines()[h].name
            )));
        }
        let mut network = network;
        for (m, list) in network.machines.iter_mut().zip(&ranks) {
            m.ranks = list.len();
        }
        let in_host = vec![InHost::Memory; ranks.len()];
        Ok(Hosts {
            network,
            host_of,
            ranks,
            in_host,
        })
    }

    /// The same grouping with host h's ranks reaching each other as `in_host(h)` says.
    pub fn with_in_host(mut self, in_host: impl Fn(usize) -> InHost) -> Hosts {
        self.in_host = (0..self.count()).map(in_host).collect();
        self
    }
    /// How host h's ranks reach each other.
    pub fn in_host(&self, h: usize) -> InHost {
        self.in_host[h]
    }
    /// Whether host h's ranks are fed by a tree among them instead of the leader's flat
    /// fan-out: they talk through sockets and are more than one rank's connection bound + 1
    /// (the fan-out's root would hold one connection per other rank). Up to that bound the
    /// fan-out stays: it is the faster one there (1 MiB to 16 ranks over loopback TCP on 2
    /// cores: 6.3 ms against 13.0 ms for a chain, docs/scale.md), capped over sockets at
    /// `plan::two_level::SOCKET_FAN_OUT` direct children of the leader (the rest one hop
    /// further).
    pub fn tree_inside(&self, h: usize) -> bool {
        match self.in_host[h] {
            InHost::Memory => false,
            InHost::Sockets { max_connections } => {
                self.ranks[h].len() > max_connections.saturating_add(1)
            }
        }
    }
    /// Whether the whole job is one host whose ranks are fed by a tree ([`Hosts::tree_inside`]):
    /// then a plan is the tree over the ranks as machines of one switch, priced as such.
    pub fn one_tree(&self) -> bool {
        self.count() == 1 && self.tree_inside(0)
    }

    /// One machine per host: host h is machine h, its link the host's NIC.
    pub fn network(&self) -> &Topology {
        &self.network
    }
    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.host_of.len()
    }
    /// Number of hosts.
    pub fn count(&self) -> usize {
        self.ranks.len()
    }
    /// The host rank `r` runs on.
    pub fn host_of(&self, r: MachineId) -> usize {
        self.host_of[r]
    }
    /// The ranks on host `h`, increasing.
    pub fn ranks(&self, h: usize) -> &[MachineId] {
        &self.ranks[h]
    }
    /// The host's name (its machine's in [`Hosts::network`]).
    pub fn name(&self, h: usize) -> &str {
        &self.network.machines()[h].name
    }
    /// Whether some host runs several ranks.
    pub fn shared(&self) -> bool {
        self.ranks.iter().any(|l| l.len() > 1)
    }
    /// The rank that receives for host `h` from the network and feeds the others: `root` on
    /// the root's host, the host's lowest rank elsewhere.
    pub fn leader(&self, h: usize, root: MachineId) -> MachineId {
        if self.host_of.get(root) == Some(&h) {
            root
        } else {
            self.ranks[h][0]
        }
    }

    /// The topology with one machine per rank, machine r being rank r: a host with one rank is
    /// its network machine; a host `N` with several is a switch `host:N` linked to N's switch
    /// (the NIC, with N's `gbps`) holding machines `N:rR`. When some host has several ranks the
    /// topology remembers this grouping ([`Topology::hosts`]).
    ///
    /// Ranks sharing a host with several NICs use its NIC 0 only: the rank topology is rail 0's
    /// ([`Topology::rail_view`]); rails need one rank per machine.
    pub fn rank_topology(&self) -> Result<Topology, TopologyError> {
        let rail0;
        let net = if self.shared() && self.network.rails() > 1 {
            rail0 = self.network.rail_view(0);
            &rail0
        } else {
            &self.network
        };
        let mut switches = net.switches().to_vec();
        let mut links = net.links().to_vec();
        let mut machines: Vec<Option<Machine>> = vec![None; self.size()];
        for (h, list) in self.ranks.iter().enumerate() {
            let of_net = &net.machines()[h];
            if list.len() == 1 {
                machines[list[0]] = Some(Machine {
                    ranks: 1,
                    ..of_net.clone()
                });
                continue;
            }
            switches.push(Switch {
                name: format!("host:{}", of_net.name),
            });
            links.push(Link {
                a: of_net.switch,
                b: switches.len() - 1,
                gbps: of_net.gbps,
            });
            for &r in list {
                let mut m = Machine::new(format!("{}:r{r}", of_net.name), switches.len() - 1);
                m.host = of_net.host.clone().or_else(|| Some(of_net.name.clone()));
                m.site = of_net.site.clone();
                machines[r] = Some(m);
            }
        }
        let machines = machines
            .into_iter()
            .map(|m| m.expect("every rank is on a host"))
            .collect();
        let mut t = Topology::new(switches, links, machines)?;
        if self.shared() {
            t.hosts = Some(Arc::new(self.clone()));
        }
        Ok(t)
    }
}

/// A file's topology with its machines' `ranks` (or `per_machine` ranks on every machine, when
/// given): rank order fills the machines in file order, machine 0's ranks first, and the ranks
/// of one machine share it as a host ([`Hosts::rank_topology`]). A file whose machines run one
/// rank each is returned as it is.
pub fn expand(file: &Topology, per_machine: Option<usize>) -> Result<Topology, TopologyError> {
    let mut network = file.clone();
    network.hosts = None;
    if let Some(k) = per_machine {
        for m in &mut network.machines {
            m.ranks = k;
        }
    }
    for m in network.machines() {
        if !(1..=MAX_RANKS_PER_MACHINE).contains(&m.ranks) {
            return Err(TopologyError::BadRanks {
                machine: m.name.clone(),
                value: m.ranks.to_string(),
            });
        }
    }
    let total = network.ranks();
    if total > MAX_RANKS {
        return Err(TopologyError::TooManyRanks { ranks: total });
    }
    if total == network.size() {
        return Ok(network);
    }
    let host_of: Vec<usize> = network
        .machines()
        .iter()
        .enumerate()
        .flat_map(|(h, m)| std::iter::repeat_n(h, m.ranks))
        .collect();
    Hosts::new(network, host_of)?.rank_topology()
}

/// The file's machine whose `host` is `name`, else whose `name` is.
pub fn machine_of_host(file: &Topology, name: &str) -> Option<usize> {
    file.machines()
        .iter()
        .position(|m| m.host.as_deref() == Some(name))
        .or_else(|| file.machine_named(name))
}

/// The topology a job plans on, machine r being rank r. `names[r]` is rank r's host name and
/// `keys[r]` its host identity (ranks with equal keys share a host and so a NIC). Ranks
/// sharing a host are grouped ([`Hosts::rank_topology`]), so plans on it are two-level.
///
/// - Without `file`: the hosts are machines on one switch `switch` (named by their key); a
///   host with several ranks becomes a switch `host:KEY` holding machines `KEY:rR`. When every
///   rank has a host of its own, that is [`Topology::single_switch`].
/// - With `file`, when every rank's host name is a machine of the file (its `host` field, else
///   its `name`): ranks go to their host's machine; a machine with several ranks becomes a
///   switch `host:NAME` behind the machine's switch, its NIC (`gbps` of the file's machine)
///   the link between them. The file's `ranks` fields are not used: the job's placement is.
/// - With `file` otherwise: rank order fills the file's machines ([`expand`]: machine 0's
///   `ranks` first), so the file's rank count must be the job's size
///   ([`TopologyError::HostsNotMachines`] when it is not).
pub fn host_topology(
    file: Option<&Topology>,
    names: &[&str],
    keys: &[String],
) -> Result<Topology, TopologyError> {
    let size = names.len();
    let Some(file) = file else {
        // Hosts in order of their lowest rank; one hash lookup per rank.
        let mut groups: Vec<(&str, usize)> = Vec::new();
        let mut group_of: HashMap<&str, usize> = HashMap::new();
        let mut host_of = Vec::with_capacity(size);
        for (r, key) in keys.iter().enumerate() {
            let h = *group_of.entry(key.as_str()).or_insert_with(|| {
                groups.push((key, r));
                groups.len() - 1
            });
            host_of.push(h);
        }
        if groups.len() == size {
            return Ok(Topology::single_switch(size));
        }
        let machines = groups
            .iter()
            .map(|&(key, first)| {
                let mut m = Machine::new(key, 0);
                m.host = Some(names[first].to_string());
                m
            })
            .collect();
        let network = Topology::new(
            vec![Switch {
                name: "switch".into(),
            }],
            Vec::new(),
            machines,
        )?;
        return Hosts::new(network, host_of)?.rank_topology();
    };
    // `machine_of_host` for every name, through two maps instead of two scans per rank.
    let (mut by_host, mut by_name) = (HashMap::new(), HashMap::new());
    for (i, m) in file.machines().iter().enumerate() {
        if let Some(h) = &m.host {
            by_host.entry(h.as_str()).or_insert(i);
        }
        by_name.entry(m.name.as_str()).or_insert(i);
    }
    let found: Vec<Option<usize>> = names
        .iter()
        .map(|name| by_host.get(name).or_else(|| by_name.get(name)).copied())
        .collect();
    if found.iter().any(Option::is_none) {
        if file.ranks() == size {
            return expand(file, None);
        }
        let missing: Vec<&str> = names
            .iter()
            .zip(&found)
            .filter(|(_, f)| f.is_none())
            .map(|(name, _)| *name)
            .collect();
        return Err(TopologyError::HostsNotMachines {
            machines: file.size(),
            size,
            missing: missing.join(", "),
        });
    }
    // Hosts in order of their lowest rank.
    let mut host_index: BTreeMap<usize, usize> = BTreeMap::new();
    let mut used = Vec::new();
    let host_of: Vec<usize> = found
        .iter()
        .map(|f| {
            let fm = f.expect("checked");
            *host_index.entry(fm).or_insert_with(|| {
                used.push(Machine {
                    ranks: 1,
                    ..file.machines()[fm].clone()
                });
                used.len() - 1
            })
        })
        .collect();
    let network = Topology::new(file.switches().to_vec(), file.links().to_vec(), used)?;
    Hosts::new(network, host_of)?.rank_topology()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::parse_topology;

    fn keys(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn ranks_sharing_a_host_sit_behind_a_host_switch() {
        let names = ["a", "b", "a", "c", "b"];
        let t = host_topology(None, &names, &keys(&names)).unwrap();
        let switches: Vec<&str> = t.switches().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(switches, ["switch", "host:a", "host:b"]);
        let on: Vec<&str> = (0..5)
            .map(|r| t.switches()[t.switch_of(r)].name.as_str())
            .collect();
        assert_eq!(on, ["host:a", "host:b", "host:a", "switch", "host:b"]);
        assert_eq!(t.machines()[2].name, "a:r2");
        // Ranks 0 and 2 leaving host a at once share its NIC (the host-switch uplink).
        let (p0, p2) = (t.path(0, 1), t.path(2, 3));
        assert!(p0.iter().any(|e| p2.contains(e)), "{p0:?} {p2:?}");
        // Between hosts a and b, opposite directions do not contend.
        let (ab, ba) = (t.path(0, 1), t.path(4, 2));
        assert!(!ab.iter().any(|e| ba.contains(e)), "{ab:?} {ba:?}");
    }

    #[test]
    fn one_rank_per_host_is_a_single_switch_and_one_host_a_host_switch() {
        let spread = ["a", "b"];
        let t = host_topology(None, &spread, &keys(&spread)).unwrap();
        assert_eq!((t.switches().len(), t.size()), (1, 2));
        assert!(t.hosts().is_none());
        let packed = ["a"; 3];
        let t = host_topology(None, &packed, &keys(&packed)).unwrap();
        let switches: Vec<&str> = t.switches().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(switches, ["switch", "host:a"]);
        let hosts = t.hosts().unwrap();
        assert_eq!((hosts.count(), hosts.ranks(0)), (1, &[0, 1, 2][..]));
        assert_eq!(hosts.network().size(), 1);
    }

    #[test]
    fn the_grouping_is_remembered() {
        let names = ["a", "b", "a", "c", "b"];
        let t = host_topology(None, &names, &keys(&names)).unwrap();
        let h = t.hosts().expect("hosts a and b hold two ranks each");
        assert_eq!((h.size(), h.count()), (5, 3));
        let groups: Vec<&[usize]> = (0..3).map(|i| h.ranks(i)).collect();
        assert_eq!(groups, [&[0, 2][..], &[1, 4], &[3]]);
        assert_eq!(
            (h.host_of(4), h.leader(1, 4), h.leader(1, 0), h.name(2)),
            (1, 4, 1, "c")
        );
        let ranks: Vec<usize> = h.network().machines().iter().map(|m| m.ranks).collect();
        assert_eq!(ranks, [2, 2, 1]);
    }

    #[test]
    fn hosts_refuse_groupings_that_do_not_fit() {
        let net = Topology::single_switch(2);
        let e = Hosts::new(net.clone(), vec![0, 2]).unwrap_err().to_string();
        assert!(e.contains("rank 1 is on host 2"), "{e}");
        let e = Hosts::new(net, vec![0, 0]).unwrap_err().to_string();
        assert!(e.contains("host n1 holds no rank"), "{e}");
    }

    #[test]
    fn expand_fills_machines_in_file_order() {
        let file = parse_topology(
            r#"{"switches": ["s0", "s1"], "links": [["s0", "s1"]],
                "machines": [{"name": "n0", "switch": "s0", "ranks": 2},
                             {"name": "n1", "switch": "s1", "gbps": 10},
                             {"name": "n2", "switch": "s1", "ranks": 3}]}"#,
        )
        .unwrap();
        let t = expand(&file, None).unwrap();
        let names: Vec<&str> = t.machines().iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["n0:r0", "n0:r1", "n1", "n2:r3", "n2:r4", "n2:r5"]);
        assert_eq!(t.machines()[2].gbps, Some(10.0));
        let h = t.hosts().unwrap();
        assert_eq!(h.network().machines()[0].name, "n0");
        assert_eq!(h.ranks(2), [3, 4, 5]);
        // --ranks-per-machine overrides the file.
        let t = expand(&file, Some(4)).unwrap();
        assert_eq!(t.size(), 12);
        assert_eq!(t.hosts().unwrap().ranks(1), [4, 5, 6, 7]);
        let t = expand(&file, Some(1)).unwrap();
        assert!(t.hosts().is_none() && t.size() == 3);
        for k in [0, MAX_RANKS_PER_MACHINE + 1] {
            let e = expand(&file, Some(k)).unwrap_err().to_string();
            assert!(e.contains("machine n0: \"ranks\""), "{e}");
        }
        let big = Topology::single_switch(2000);
        let e = expand(&big, Some(1000)).unwrap_err().to_string();
        assert!(e.contains("2000000 ranks in all"), "{e}");
    }

    const FILE: &str = r#"{"switches": ["s0", "s1"], "links": [{"a": "s0", "b": "s1"}],
        "machines": [{"name": "n0", "switch": "s0"},
                     {"name": "n1", "switch": "s1", "host": "node-b", "gbps": 10},
                     {"name": "n2", "switch": "s1"}]}"#;

    #[test]
    fn file_maps_ranks_to_machines_by_host_name() {
        let file = parse_topology(FILE).unwrap();
        let names = ["node-b", "n0", "node-b", "n2"];
        let t = host_topology(Some(&file), &names, &keys(&names)).unwrap();
        let machines: Vec<&str> = t.machines().iter().map(|m| m.name.as_str()).collect();
        assert_eq!(machines, ["n1:r0", "n0", "n1:r2", "n2"]);
        let hs = t.switch_named("host:n1").unwrap();
        assert_eq!((t.switch_of(0), t.switch_of(2)), (hs, hs));
        let s1 = t.switch_named("s1").unwrap();
        assert_eq!(t.switch_of(3), s1);
        let nic = t.links().iter().find(|l| l.b == hs).unwrap();
        assert_eq!((nic.a, nic.gbps), (s1, Some(10.0)));
    }

    #[test]
    fn file_without_host_names_is_rank_order_or_a_clear_error() {
        let file = parse_topology(FILE).unwrap();
        let mut doubled = file.clone();
        doubled.machines[1].ranks = 2;
        let four = ["x"; 4];
        let t = host_topology(Some(&doubled), &four, &keys(&four)).unwrap();
        assert_eq!(t.hosts().unwrap().ranks(1), [1, 2]);
        let three = ["x"; 3];
        let t = host_topology(Some(&file), &three, &keys(&three)).unwrap();
        assert_eq!(t.machines()[1].name, "n1");
        let four = ["x"; 4];
        let e = host_topology(Some(&file), &four, &keys(&four))
            .unwrap_err()
            .to_string();
        assert!(e.contains("x") && e.contains("3 machines"), "{e}");
    }
}
