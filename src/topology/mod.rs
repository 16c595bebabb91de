//! The physical network: switches joined in a tree, machines attached to switches.
//!
//! This is the network model of seed 000 §3 (`../shared/seeds/000_4ae1cf15394cd769.txt`):
//! switches are joined by full-duplex links that form a tree (what Ethernet's spanning tree
//! leaves), every machine hangs off one switch, and a message from machine `u` to machine `v`
//! follows the unique path between them. Each full-duplex link is two *directed edges*; two
//! communications contend exactly when their paths share a directed edge.
//!
//! Rank `r` of a job is `machines[r]`.

#![deny(unsafe_code)]

pub mod discover;
mod error;
mod file;
pub mod gen;
pub mod hosts;
pub mod lldpd;
pub mod mpich_coords;
pub mod slurm;

pub use error::TopologyError;
pub use file::{parse_topology, to_json};
pub use hosts::Hosts;
use std::sync::Arc;

/// Why `name` cannot name a switch, machine, host or platform node: it is empty, or it holds a
/// control character such as NUL, which C strings, launchers and terminals would cut or garble.
/// `None` when it can.
pub fn name_fault(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("is empty: give it a name".into());
    }
    name.chars().find(|c| c.is_control()).map(|c| {
        format!(
            "holds the control character U+{:04X}: names must be printable text",
            c as u32
        )
    })
}

/// Index of a switch in [`Topology::switches`].
pub type SwitchId = usize;
/// Index of a machine in [`Topology::machines`]; equal to the machine's rank.
pub type MachineId = usize;

/// A switch: a node of the switch tree.
#[derive(Debug, Clone, PartialEq)]
pub struct Switch {
    pub name: String,
}

/// A machine (a host with one NIC) attached to one switch.
#[derive(Debug, Clone, PartialEq)]
pub struct Machine {
    pub name: String,
    pub switch: SwitchId,
    /// Optional site label (seed 002 §3.2 chains sites).
    pub site: Option<String>,
    /// Optional MAC address, as written in the file.
    pub mac: Option<String>,
    /// Optional switch port name the machine is plugged into.
    pub port: Option<String>,
    /// Optional host name (for launchers).
    pub host: Option<String>,
    /// Optional bandwidth of the machine's own link in Gbit/s.
    pub gbps: Option<f64>,
    /// Ranks the machine runs (file field `ranks`, default 1; 1 to
    /// [`hosts::MAX_RANKS_PER_MACHINE`]). They share its NIC: [`hosts::expand`] turns a file's
    /// machines into one machine per rank, and the ranks of one machine into a host.
    pub ranks: usize,
}

impl Machine {
    pub fn new(name: impl Into<String>, switch: SwitchId) -> Machine {
        Machine {
            name: name.into(),
            switch,
            site: None,
            mac: None,
            port: None,
            host: None,
            gbps: None,
            ranks: 1,
        }
    }
}

/// A full-duplex switch-to-switch link.
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    pub a: SwitchId,
    pub b: SwitchId,
    /// Optional bandwidth in Gbit/s.
    pub gbps: Option<f64>,
}

/// One direction of one physical link. Machine links and switch links are numbered apart:
/// for machine `m`, `2m` is machine→switch and `2m+1` switch→machine; for switch link `l`,
/// `2P + 2l` is `a→b` and `2P + 2l + 1` is `b→a` (P = number of machines).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DirEdge(pub u32);

/// A validated topology: the switch links form a tree and every name is unique.
#[derive(Debug, Clone)]
pub struct Topology {
    switches: Vec<Switch>,
    links: Vec<Link>,
    machines: Vec<Machine>,
    /// Switch tree rooted at switch 0: parent switch and the link to it.
    up: Vec<Option<(SwitchId, usize)>>,
    depth: Vec<u32>,
    /// Neighbours of each switch with the link index, sorted by neighbour id.
    adjacency: Vec<Vec<(SwitchId, usize)>>,
    /// Which machines (ranks) share a host, when some do ([`hosts::Hosts::rank_topology`]).
    hosts: Option<Arc<Hosts>>,
}

impl Topology {
    /// Builds and validates a topology. Errors name the offending switches or machines.
    pub fn new(
        switches: Vec<Switch>,
        links: Vec<Link>,
        machines: Vec<Machine>,
    ) -> Result<Topology, TopologyError> {
        error::validate(&switches, &links, &machines)?;
        let mut adjacency = vec![Vec::new(); switches.len()];
        for (l, link) in links.iter().enumerate() {
            adjacency[link.a].push((link.b, l));
            adjacency[link.b].push((link.a, l));
        }
        for list in &mut adjacency {
            list.sort_unstable();
        }
        let mut up = vec![None; switches.len()];
        let mut depth = vec![0u32; switches.len()];
        let mut seen = vec![false; switches.len()];
        let mut stack = vec![0];
        seen[0] = true;
        while let Some(s) = stack.pop() {
            for &(n, l) in &adjacency[s] {
                if !seen[n] {
                    seen[n] = true;
                    up[n] = Some((s, l));
                    depth[n] = depth[s] + 1;
                    stack.push(n);
                }
            }
        }
        Ok(Topology {
            switches,
            links,
            machines,
            up,
            depth,
            adjacency,
            hosts: None,
        })
    }

    /// `n` machines named `n0…` on one switch `s0`: the default when nothing else is known.
    pub fn single_switch(n: usize) -> Topology {
        let machines = (0..n).map(|i| Machine::new(format!("n{i}"), 0)).collect();
        Topology::new(vec![Switch { name: "s0".into() }], Vec::new(), machines)
            .expect("a single switch with distinct machine names is valid")
    }

    pub fn switches(&self) -> &[Switch] {
        &self.switches
    }
    pub fn links(&self) -> &[Link] {
        &self.links
    }
    pub fn machines(&self) -> &[Machine] {
        &self.machines
    }
    /// Number of machines (= ranks).
    pub fn size(&self) -> usize {
        self.machines.len()
    }
    /// Ranks the file describes: the sum of the machines' `ranks` (= [`Topology::size`] when
    /// every machine runs one rank; [`hosts::expand`] makes one machine per rank).
    pub fn ranks(&self) -> usize {
        self.machines.iter().map(|m| m.ranks).sum()
    }
    /// Which machines are ranks of one host (one NIC), when some are: plans on this topology
    /// are two-level (`plan::two_level`). `None` when every machine is a host of its own.
    pub fn hosts(&self) -> Option<&Hosts> {
        self.hosts.as_deref()
    }
    /// The switch machine `m` is attached to.
    pub fn switch_of(&self, m: MachineId) -> SwitchId {
        self.machines[m].switch
    }
    /// Neighbour switches of `s` with the link index, by increasing switch id.
    pub fn neighbours(&self, s: SwitchId) -> &[(SwitchId, usize)] {
        &self.adjacency[s]
    }
    /// Machines attached to switch `s`, in rank order.
    pub fn machines_on(&self, s: SwitchId) -> impl Iterator<Item = MachineId> + '_ {
        self.machines
            .iter()
            .enumerate()
            .filter(move |(_, m)| m.switch == s)
            .map(|(i, _)| i)
    }
    /// Number of distinct directed edges ids (`2·(P + links)`).
    pub fn edge_count(&self) -> usize {
        2 * (self.machines.len() + self.links.len())
    }
    pub fn machine_up(&self, m: MachineId) -> DirEdge {
        DirEdge(2 * m as u32)
    }
    pub fn machine_down(&self, m: MachineId) -> DirEdge {
        DirEdge(2 * m as u32 + 1)
    }
    /// Directed edge from switch `from` to its neighbour over link `l`.
    pub fn link_edge(&self, l: usize, from: SwitchId) -> DirEdge {
        let base = 2 * (self.machines.len() + l) as u32;
        if self.links[l].a == from {
            DirEdge(base)
        } else {
            DirEdge(base + 1)
        }
    }
    /// Bandwidth of a directed edge in Gbit/s, if the file gave one.
    pub fn edge_gbps(&self, e: DirEdge) -> Option<f64> {
        let p2 = 2 * self.machines.len() as u32;
        if e.0 < p2 {
            self.machines[(e.0 / 2) as usize].gbps
        } else {
            self.links[((e.0 - p2) / 2) as usize].gbps
        }
    }
    /// A readable name for a directed edge, e.g. `n3->s0` or `s0->s1`.
    pub fn edge_name(&self, e: DirEdge) -> String {
        let p2 = 2 * self.machines.len() as u32;
        if e.0 < p2 {
            let m = &self.machines[(e.0 / 2) as usize];
            let s = &self.switches[m.switch].name;
            if e.0 % 2 == 0 {
                format!("{}->{}", m.name, s)
            } else {
                format!("{}->{}", s, m.name)
            }
        } else {
            let l = &self.links[((e.0 - p2) / 2) as usize];
            let (a, b) = (&self.switches[l.a].name, &self.switches[l.b].name);
            if (e.0 - p2) % 2 == 0 {
                format!("{a}->{b}")
            } else {
                format!("{b}->{a}")
            }
        }
    }

    /// The directed switch links from switch `a` to switch `b`, in path order.
    pub fn switch_path(&self, a: SwitchId, b: SwitchId) -> Vec<DirEdge> {
        let (mut x, mut y) = (a, b);
        let mut ups = Vec::new();
        let mut downs = Vec::new();
        while self.depth[x] > self.depth[y] {
            let (p, l) = self.up[x].expect("deeper switch has a parent");
            ups.push(self.link_edge(l, x));
            x = p;
        }
        while self.depth[y] > self.depth[x] {
            let (p, l) = self.up[y].expect("deeper switch has a parent");
            downs.push(self.link_edge(l, p));
            y = p;
        }
        while x != y {
            let (px, lx) = self.up[x].expect("distinct switches at equal depth have parents");
            ups.push(self.link_edge(lx, x));
            x = px;
            let (py, ly) = self.up[y].expect("distinct switches at equal depth have parents");
            downs.push(self.link_edge(ly, py));
            y = py;
        }
        downs.reverse();
        ups.extend(downs);
        ups
    }

    /// The directed edges a message from machine `u` to machine `v` crosses, in order.
    /// Empty when `u == v`.
    pub fn path(&self, u: MachineId, v: MachineId) -> Vec<DirEdge> {
        if u == v {
            return Vec::new();
        }
        let mut edges = vec![self.machine_up(u)];
        edges.extend(self.switch_path(self.switch_of(u), self.switch_of(v)));
        edges.push(self.machine_down(v));
        edges
    }

    /// Seed 000 §3: communications `u1→v1` and `u2→v2` contend iff their paths share a
    /// directed edge.
    pub fn contends(
        &self,
        (u1, v1): (MachineId, MachineId),
        (u2, v2): (MachineId, MachineId),
    ) -> bool {
        let p1 = self.path(u1, v1);
        let p2 = self.path(u2, v2);
        p1.iter().any(|e| p2.contains(e))
    }

    /// Index of the machine named `name`.
    pub fn machine_named(&self, name: &str) -> Option<MachineId> {
        self.machines.iter().position(|m| m.name == name)
    }
    /// Index of the switch named `name`.
    pub fn switch_named(&self, name: &str) -> Option<SwitchId> {
        self.switches.iter().position(|s| s.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Topology {
        // s0 - s1 - s2, s1 - s3; two machines on s0, one on s2, one on s3.
        let sw = |n: &str| Switch { name: n.into() };
        let link = |a, b| Link { a, b, gbps: None };
        Topology::new(
            vec![sw("s0"), sw("s1"), sw("s2"), sw("s3")],
            vec![link(0, 1), link(1, 2), link(1, 3)],
            vec![
                Machine::new("n0", 0),
                Machine::new("n1", 0),
                Machine::new("n2", 2),
                Machine::new("n3", 3),
            ],
        )
        .unwrap()
    }

    #[test]
    fn paths_follow_the_switch_tree() {
        let t = sample();
        let names: Vec<String> = t.path(0, 2).iter().map(|&e| t.edge_name(e)).collect();
        assert_eq!(names, ["n0->s0", "s0->s1", "s1->s2", "s2->n2"]);
        let names: Vec<String> = t.path(3, 2).iter().map(|&e| t.edge_name(e)).collect();
        assert_eq!(names, ["n3->s3", "s3->s1", "s1->s2", "s2->n2"]);
        let names: Vec<String> = t.path(0, 1).iter().map(|&e| t.edge_name(e)).collect();
        assert_eq!(names, ["n0->s0", "s0->n1"]);
        assert!(t.path(1, 1).is_empty());
    }

    #[test]
    fn contention_is_directional() {
        let t = sample();
        // n0->n2 and n1->n3 both cross s0->s1.
        assert!(t.contends((0, 2), (1, 3)));
        // n0->n2 and n2->n0 use opposite directions only.
        assert!(!t.contends((0, 2), (2, 0)));
        // same receiver: share the last edge.
        assert!(t.contends((0, 2), (3, 2)));
        // same sender: share the first edge.
        assert!(t.contends((0, 1), (0, 2)));
    }

    #[test]
    fn edge_ids_are_dense_and_named_once() {
        let t = sample();
        let mut names: Vec<String> = (0..t.edge_count() as u32)
            .map(|e| t.edge_name(DirEdge(e)))
            .collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), t.edge_count());
    }
}
