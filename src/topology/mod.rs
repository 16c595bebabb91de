//! The physical network: switches joined in a tree, machines attached to switches.
//!
//! This is the network model of seed 000 §3 (`../shared/seeds/000_4ae1cf15394cd769.txt`):
//! switches are joined by full-duplex links that form a tree (what Ethernet's spanning tree
//! leaves), every machine hangs off one switch, and a message from machine `u` to machine `v`
//! follows the unique path between them. Each full-duplex link is two *directed edges*; two
//! communications contend exactly when their paths share a directed edge.
//!
//! Rank `r` of a job is `machines[r]`.
//!
//! **Rails** (seed 002, `002_837947fc000c5185.txt` §2.1: every node has two NICs). A machine
//! may have several NICs; NIC i of every machine is on *rail i*. Every machine has the same
//! number of NICs, and all NICs of one rail hang off switches of one tree of the switch forest
//! (the rails may be separate trees or share one). A message sent on rail i leaves machine u
//! through u's NIC i and enters v through v's NIC i ([`Topology::path_on`]); each NIC is two
//! directed edges of its own, so transfers on different rails contend only on switch links the
//! rails share.

#![deny(unsafe_code)]

pub mod discover;
mod error;
mod file;
pub mod gen;
pub mod hosts;
pub mod lldpd;
pub mod mpich_coords;
mod restrict;
pub mod slurm;

pub use error::TopologyError;
pub use file::{parse_topology, to_json};
pub use hosts::{Hosts, InHost};
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

/// Most NICs (rails) one machine may have: far above real clusters (2–8 rails), small enough
/// that a file cannot make the edge numbering or the planners' per-rail work explode.
pub const MAX_NICS: usize = 16;

/// A machine's NIC beyond the first: the switch it is plugged into, and what the file says of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Nic {
    pub switch: SwitchId,
    pub mac: Option<String>,
    pub port: Option<String>,
}

/// A machine (a host) attached to one switch per NIC.
#[derive(Debug, Clone, PartialEq)]
pub struct Machine {
    pub name: String,
    /// The switch of NIC 0 (rail 0).
    pub switch: SwitchId,
    /// Optional site label (seed 002 §3.2 chains sites).
    pub site: Option<String>,
    /// Optional MAC address (of NIC 0), as written in the file.
    pub mac: Option<String>,
    /// Optional switch port name NIC 0 is plugged into.
    pub port: Option<String>,
    /// Optional host name (for launchers).
    pub host: Option<String>,
    /// Optional bandwidth of the machine's own link in Gbit/s.
    pub gbps: Option<f64>,
    /// Ranks the machine runs (file field `ranks`, default 1; 1 to
    /// [`hosts::MAX_RANKS_PER_MACHINE`]). They share its NIC: [`hosts::expand`] turns a file's
    /// machines into one machine per rank, and the ranks of one machine into a host.
    pub ranks: usize,
    /// NICs 1, 2, … (rails 1, 2, …); empty for a machine with one NIC. NIC 0 is `switch`,
    /// `mac`, `port`.
    pub rails: Vec<Nic>,
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
            rails: Vec::new(),
        }
    }

    /// Number of NICs (= rails of its topology).
    pub fn nic_count(&self) -> usize {
        1 + self.rails.len()
    }

    /// The switch NIC `rail` is plugged into (`None` past the machine's NICs).
    pub fn nic_switch(&self, rail: usize) -> Option<SwitchId> {
        match rail {
            0 => Some(self.switch),
            r => self.rails.get(r - 1).map(|n| n.switch),
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
/// for machine `m`, `2m` is machine→switch and `2m+1` switch→machine (its NIC 0); for switch
/// link `l`, `2P + 2l` is `a→b` and `2P + 2l + 1` is `b→a` (P = number of machines, L of
/// links); with k rails, NIC i ≥ 1 of machine m is `2P + 2L + 2((k−1)m + i − 1)` up and that
/// plus one down.
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
    /// NICs per machine (1 without rails).
    rails: usize,
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
        // One tree per rail network when the rails are apart (validation allows that only
        // with rails): each tree is rooted at its lowest switch.
        for start in 0..switches.len() {
            if seen[start] {
                continue;
            }
            let mut stack = vec![start];
            seen[start] = true;
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
        }
        let rails = machines.first().map_or(1, Machine::nic_count);
        Ok(Topology {
            switches,
            links,
            machines,
            up,
            depth,
            adjacency,
            hosts: None,
            rails,
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
    /// The same topology with host h's ranks reaching each other as `in_host(h)` says
    /// ([`hosts::InHost`]); unchanged when every machine is a host of its own.
    pub fn with_in_host(mut self, in_host: impl Fn(usize) -> hosts::InHost) -> Topology {
        if let Some(h) = self.hosts.take() {
            self.hosts = Some(Arc::new((*h).clone().with_in_host(in_host)));
        }
        self
    }
    /// The switch machine `m` is attached to (by its NIC 0).
    pub fn switch_of(&self, m: MachineId) -> SwitchId {
        self.machines[m].switch
    }
    /// Number of rails: NICs per machine (1 for a topology without `nics`).
    pub fn rails(&self) -> usize {
        self.rails
    }
    /// The switch NIC `rail` of machine `m` is plugged into. `rail < self.rails()`.
    pub fn nic_switch(&self, m: MachineId, rail: usize) -> SwitchId {
        self.machines[m]
            .nic_switch(rail)
            .expect("validated: every machine has one NIC per rail")
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
    /// Number of distinct directed edges ids (`2·(P·rails + links)`).
    pub fn edge_count(&self) -> usize {
        2 * (self.machines.len() * self.rails + self.links.len())
    }
    pub fn machine_up(&self, m: MachineId) -> DirEdge {
        DirEdge(2 * m as u32)
    }
    pub fn machine_down(&self, m: MachineId) -> DirEdge {
        DirEdge(2 * m as u32 + 1)
    }
    /// First edge id of the NICs beyond the first (`2P + 2L`).
    fn extra_nic_base(&self) -> u32 {
        2 * (self.machines.len() + self.links.len()) as u32
    }
    /// Machine `m`'s NIC `rail`, machine → switch.
    pub fn nic_up(&self, m: MachineId, rail: usize) -> DirEdge {
        if rail == 0 {
            return self.machine_up(m);
        }
        DirEdge(self.extra_nic_base() + 2 * ((self.rails - 1) * m + rail - 1) as u32)
    }
    /// Machine `m`'s NIC `rail`, switch → machine.
    pub fn nic_down(&self, m: MachineId, rail: usize) -> DirEdge {
        DirEdge(self.nic_up(m, rail).0 + 1)
    }
    /// For an edge of a NIC: the machine, the rail, and whether it points up (machine → switch).
    fn nic_of_edge(&self, e: DirEdge) -> Option<(MachineId, usize, bool)> {
        let (p2, base) = (2 * self.machines.len() as u32, self.extra_nic_base());
        if e.0 < p2 {
            Some(((e.0 / 2) as usize, 0, e.0 % 2 == 0))
        } else if e.0 >= base {
            let i = ((e.0 - base) / 2) as usize;
            let per = self.rails - 1;
            Some((i / per, i % per + 1, (e.0 - base) % 2 == 0))
        } else {
            None
        }
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
    /// Every NIC of a machine has the machine's `gbps`.
    pub fn edge_gbps(&self, e: DirEdge) -> Option<f64> {
        let p2 = 2 * self.machines.len() as u32;
        if let Some((m, _, _)) = self.nic_of_edge(e) {
            self.machines[m].gbps
        } else {
            self.links[((e.0 - p2) / 2) as usize].gbps
        }
    }
    /// A readable name for a directed edge, e.g. `n3->s0` or `s0->s1`; a NIC past the first
    /// carries its rail, e.g. `n3#1->b0`.
    pub fn edge_name(&self, e: DirEdge) -> String {
        let p2 = 2 * self.machines.len() as u32;
        if let Some((m, rail, up)) = self.nic_of_edge(e) {
            let s = &self.switches[self.nic_switch(m, rail)].name;
            let m = &self.machines[m].name;
            let m = if rail == 0 {
                m.clone()
            } else {
                format!("{m}#{rail}")
            };
            if up {
                format!("{m}->{s}")
            } else {
                format!("{s}->{m}")
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

    /// The directed edges a message from machine `u` to machine `v` crosses, in order, on
    /// rail 0. Empty when `u == v`.
    pub fn path(&self, u: MachineId, v: MachineId) -> Vec<DirEdge> {
        self.path_on(0, u, v)
    }

    /// The directed edges a message from `u` to `v` crosses on rail `rail`: out of u's NIC
    /// `rail`, along the switch tree, into v's NIC `rail`. Empty when `u == v`.
    pub fn path_on(&self, rail: usize, u: MachineId, v: MachineId) -> Vec<DirEdge> {
        if u == v {
            return Vec::new();
        }
        let mut edges = vec![self.nic_up(u, rail)];
        edges.extend(self.switch_path(self.nic_switch(u, rail), self.nic_switch(v, rail)));
        edges.push(self.nic_down(v, rail));
        edges
    }

    /// Rail `rail` alone, as a topology with one NIC per machine: the switches of the rail's
    /// tree (renumbered in order), the links among them, and every machine on its NIC `rail`
    /// (with that NIC's `mac` and `port`). Machine ids are unchanged, so a tree planned on the
    /// view is a tree for the rail. `rail < self.rails()`.
    pub fn rail_view(&self, rail: usize) -> Topology {
        let mut t = if self.rails == 1 {
            self.clone()
        } else {
            self.keep_rails(&[rail])
        };
        t.hosts = None;
        t
    }

    /// The network as seen through NICs `0..k` only: what a link that carries `k` rails uses
    /// (a link with fewer NICs than the file's machines sends every lane through NIC 0, where
    /// lanes on "rail 1" would in fact share NIC 0, and plans and prices must say so). `k ≥
    /// self.rails()` is the topology itself; `k ≤ 1` is rail 0's view. Which ranks share a
    /// host is kept.
    pub fn first_rails(&self, k: usize) -> Topology {
        if k >= self.rails {
            return self.clone();
        }
        let mut t = self.keep_rails(&(0..k.max(1)).collect::<Vec<_>>());
        t.hosts = self.hosts.clone();
        t
    }

    /// The topology of NICs `rails` (in that order: NIC i of the result is NIC `rails[i]`):
    /// the switch trees they use, renumbered in order, and the links among them.
    fn keep_rails(&self, rails: &[usize]) -> Topology {
        let component = |mut s: SwitchId| {
            while let Some((p, _)) = self.up[s] {
                s = p;
            }
            s
        };
        let used: Vec<SwitchId> = rails
            .iter()
            .map(|&r| component(self.nic_switch(0, r)))
            .collect();
        let mut renumber = vec![usize::MAX; self.switches.len()];
        let mut switches = Vec::new();
        for (s, sw) in self.switches.iter().enumerate() {
            if used.contains(&component(s)) {
                renumber[s] = switches.len();
                switches.push(sw.clone());
            }
        }
        let links = self
            .links
            .iter()
            .filter(|l| renumber[l.a] != usize::MAX)
            .map(|l| Link {
                a: renumber[l.a],
                b: renumber[l.b],
                gbps: l.gbps,
            })
            .collect();
        let machines = self
            .machines
            .iter()
            .map(|m| {
                let nic = |r: usize| match r {
                    0 => Nic {
                        switch: m.switch,
                        mac: m.mac.clone(),
                        port: m.port.clone(),
                    },
                    r => m.rails[r - 1].clone(),
                };
                let first = nic(rails[0]);
                Machine {
                    switch: renumber[first.switch],
                    mac: first.mac,
                    port: first.port,
                    rails: rails[1..]
                        .iter()
                        .map(|&r| {
                            let n = nic(r);
                            Nic {
                                switch: renumber[n.switch],
                                ..n
                            }
                        })
                        .collect(),
                    ..m.clone()
                }
            })
            .collect();
        Topology::new(switches, links, machines)
            .expect("some rails of a valid topology are a valid topology")
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
    use crate::topology::gen;

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

    /// Every edge id below `edge_count` has a name of its own.
    fn assert_edges_named_once(t: &Topology) {
        let mut names: Vec<String> = (0..t.edge_count() as u32)
            .map(|e| t.edge_name(DirEdge(e)))
            .collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), t.edge_count());
    }

    #[test]
    fn edge_ids_are_dense_and_named_once() {
        assert_edges_named_once(&sample());
    }

    #[test]
    fn rails_have_their_own_nic_edges_and_views() {
        let t = gen::rails(2, 1, 2, false); // a0-a1 and b0-b1, n0 n1 on a0/b0, n2 n3 on a1/b1
        assert_eq!(t.edge_count(), 2 * (4 * 2 + 2));
        let on = |rail| -> Vec<String> {
            t.path_on(rail, 0, 2)
                .iter()
                .map(|&e| t.edge_name(e))
                .collect()
        };
        assert_eq!(on(0), ["n0->a0", "a0->a1", "a1->n2"]);
        assert_eq!(on(1), ["n0#1->b0", "b0->b1", "b1->n2#1"]);
        // Different rails never share an edge here; the same rail does as before.
        let p0 = t.path_on(0, 0, 2);
        assert!(t.path_on(1, 1, 3).iter().all(|e| !p0.contains(e)));
        assert!(t.path_on(0, 1, 3).iter().any(|e| p0.contains(e)));
        assert_edges_named_once(&t);
        let view = t.rail_view(1);
        assert_eq!(view.rails(), 1);
        let names: Vec<&str> = view.switches().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["b0", "b1"]);
        assert_eq!(view.switch_of(2), 1);
    }

    #[test]
    fn the_first_rails_of_a_topology() {
        let t = gen::rails(3, 1, 2, false);
        assert_eq!(t.first_rails(3).rails(), 3);
        assert_eq!(t.first_rails(7).rails(), 3);
        let two = t.first_rails(2);
        assert_eq!(two.rails(), 2);
        assert_eq!(two.size(), t.size());
        let names = |t: &Topology, rail| -> Vec<String> {
            t.path_on(rail, 0, 2)
                .iter()
                .map(|&e| t.edge_name(e))
                .collect()
        };
        assert_eq!(names(&two, 1), names(&t, 1));
        assert_eq!(names(&two, 0), names(&t, 0));
        for k in [0, 1] {
            let one = t.first_rails(k);
            assert_eq!(one.rails(), 1);
            let names: Vec<&str> = one.switches().iter().map(|s| s.name.as_str()).collect();
            assert_eq!(names, ["a0", "a1"]);
        }
        // Ranks sharing hosts stay so.
        let shared = Hosts::new(t.clone(), vec![0, 0, 1, 2, 3])
            .unwrap()
            .rank_topology()
            .unwrap();
        assert!(shared.first_rails(1).hosts().is_some());
    }
}
