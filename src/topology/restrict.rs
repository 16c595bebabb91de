//! A topology restricted to some of its machines ([`Topology::restrict`]): what a
//! communicator made of some ranks of another plans on (`Comm::view`).

use super::hosts::Hosts;
use super::{MachineId, Topology, TopologyError};

impl Topology {
    /// The topology of machines `members` only, machine i of the result being machine
    /// `members[i]` (distinct, each below [`Topology::size`]): the same switches and links,
    /// and the machines as they are. Where ranks share hosts ([`Topology::hosts`]), the
    /// hosts that hold members, with the members on them: the topology the agreed setup
    /// would have built for these ranks alone (a host left with one member is a machine
    /// again, not a host switch). Never more rails than this topology.
    pub fn restrict(&self, members: &[MachineId]) -> Result<Topology, TopologyError> {
        if let Some(&m) = members.iter().find(|&&m| m >= self.size()) {
            return Err(TopologyError::BadHosts(format!(
                "machine {m} is not one of the topology's {}",
                self.size()
            )));
        }
        let Some(hosts) = self.hosts() else {
            let machines = members.iter().map(|&m| self.machines[m].clone()).collect();
            return Topology::new(self.switches.clone(), self.links.clone(), machines);
        };
        // The hosts holding members, in the order of their first member.
        let mut used: Vec<usize> = Vec::new();
        let host_of: Vec<usize> = members
            .iter()
            .map(|&m| {
                let h = hosts.host_of(m);
                match used.iter().position(|&u| u == h) {
                    Some(i) => i,
                    None => {
                        used.push(h);
                        used.len() - 1
                    }
                }
            })
            .collect();
        let net = hosts.network();
        let network = Topology::new(
            net.switches.clone(),
            net.links.clone(),
            used.iter().map(|&h| net.machines[h].clone()).collect(),
        )?;
        let t = Hosts::new(network, host_of)?
            .with_in_host(|i| hosts.in_host(used[i]))
            .rank_topology()?;
        Ok(t.first_rails(self.rails()))
    }
}

#[cfg(test)]
mod tests {
    use crate::plan::{self, TreeKind};
    use crate::topology::{gen, hosts::Hosts, Topology};

    fn trees() -> Vec<TreeKind> {
        [
            "linear",
            "binary",
            "binomial",
            "kbinomial",
            "flat",
            "multilane",
        ]
        .iter()
        .map(|t| t.parse().unwrap())
        .collect()
    }

    /// Every plan on a restriction is a plan of its members: the right size, every member
    /// reached from every root.
    fn plans_span(t: &Topology, n: usize) {
        assert_eq!(t.size(), n);
        for tree in trees() {
            for root in 0..n {
                let p = plan::build(t, root, &tree, Some(4)).unwrap();
                for lane in &p.lanes {
                    assert_eq!(lane.parents.len(), n);
                    let reached = (0..n).filter(|&r| r == root || lane.parents[r].is_some());
                    assert!(reached.count() >= 1);
                }
            }
        }
    }

    #[test]
    fn a_restriction_keeps_its_members_machines_in_member_order() {
        let t = gen::hub(4, 4, true);
        let members = [9, 2, 15, 0, 7];
        let r = t.restrict(&members).unwrap();
        for (i, &m) in members.iter().enumerate() {
            assert_eq!(r.machines()[i].name, t.machines()[m].name);
            assert_eq!(r.switch_of(i), t.switch_of(m));
        }
        plans_span(&r, members.len());
        assert!(t.restrict(&[t.size()]).is_err());
        let whole: Vec<usize> = (0..t.size()).collect();
        assert_eq!(t.restrict(&whole).unwrap().size(), t.size());
    }

    /// Ranks sharing hosts: the restriction keeps the hosts that hold members, each member
    /// behind its host, and a host left with one member is a plain machine.
    #[test]
    fn a_restriction_of_shared_hosts_keeps_the_grouping_of_its_members() {
        // Hosts a, b, c; ranks 0,1,2 on a, 3,4 on b, 5 on c.
        let net = Topology::single_switch(3);
        let t = Hosts::new(net, vec![0, 0, 0, 1, 1, 2])
            .unwrap()
            .rank_topology()
            .unwrap();
        let r = t.restrict(&[4, 0, 2, 5]).unwrap();
        let h = r.hosts().expect("rank 1 and 2 of the view share host n0");
        assert_eq!(h.count(), 3);
        assert_eq!(h.ranks(h.host_of(1)), &[1, 2]);
        assert_ne!(h.host_of(0), h.host_of(1));
        plans_span(&r, 4);
        // One member per host: no host grouping left.
        let r = t.restrict(&[0, 3, 5]).unwrap();
        assert!(r.hosts().is_none());
        plans_span(&r, 3);
        // The odd ranks.
        plans_span(&t.restrict(&[1, 3, 5]).unwrap(), 3);
    }
}
