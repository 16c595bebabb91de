//! Communicators as views ([`Comm::view`]): a communicator of some of another's ranks, on
//! the same engine (its progress thread, links and endpoint), made locally: no collective,
//! no thread, no connection, no descriptor. It plans in its own rank space (its topology is
//! the base's restricted to its members, in its rank order) and its plans are translated to
//! the engine's processes when posted.

use super::{tree_dump, Comm, CommError};
use crate::plan::Lane;
use std::collections::BTreeMap;
use std::sync::Arc;

impl Comm {
    /// A communicator of `members` of this one, made locally: `members[i]` is the rank in
    /// this communicator of the view's rank i (distinct, in range, this rank among them).
    /// `id` names it on every member (the MPI glue passes the communicator's context id) and
    /// must differ from every other live communicator's on this process's engine (the base
    /// communicator is 0); an id may be used again once the communicator that had it is
    /// dropped and its broadcasts have completed at every member. A view of a view is a view
    /// of the same engine. Broadcasts on different communicators may be posted in any
    /// interleaving, and in different ones at different ranks (MPI's rule: collectives are
    /// ordered per communicator).
    pub fn view(&self, id: u32, members: &[usize]) -> crate::Result<Comm> {
        let rank = check_members(self.rank, self.size, members)?;
        let procs: Vec<usize> = members.iter().map(|&m| self.process(m)).collect();
        // A communicator joined on this engine has its own topology (`comm::grow`): its
        // views restrict that one, the others the engine's.
        let topology = if self.joined {
            self.topology.restrict(members)
        } else {
            self.engine.known.topology.restrict(&procs)
        }
        .map_err(|e| CommError::Usage(format!("cannot restrict the topology to the view: {e}")))?;
        self.engine.take_id(id)?;
        let placed = self.engine.placement(&procs);
        let identity =
            procs.len() == self.engine.known.size && procs.iter().enumerate().all(|(i, &p)| i == p);
        let dump = self
            .config
            .tree_dump
            .as_deref()
            .map(|dir| tree_dump::TreeDump::new(dir, rank));
        Ok(Comm {
            rank,
            size: members.len(),
            id,
            members: (!identity).then(|| Arc::new(procs)),
            topology,
            config: self.config.clone(),
            bootstrap: None,
            plans: BTreeMap::new(),
            choices: BTreeMap::new(),
            seq: 0,
            engine: self.engine.clone(),
            failed: None,
            hosts: placed.hosts,
            host_ranks: placed.host_ranks,
            host_cpus: placed.host_cpus,
            dump,
            joined: self.joined,
            link: self.link.clone(),
        })
    }

    /// This communicator's id on its engine (0: the communicator the engine was made for).
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The engine's process (the base communicator's rank) of rank `rank`.
    pub fn process(&self, rank: usize) -> usize {
        self.members.as_ref().map_or(rank, |m| m[rank])
    }

    /// `lanes` (over this communicator's ranks) over the engine's processes: a process that
    /// is not a member takes no part.
    pub(super) fn to_engine(&self, lanes: &Arc<Vec<Lane>>) -> Arc<Vec<Lane>> {
        let Some(members) = &self.members else {
            return lanes.clone();
        };
        let p = self.engine.processes();
        let lanes = lanes
            .iter()
            .map(|lane| {
                let mut parents = vec![None; p];
                let mut children = vec![Vec::new(); p];
                for (i, &m) in members.iter().enumerate() {
                    parents[m] = lane.parents[i].map(|q| members[q]);
                    children[m] = lane.children[i].iter().map(|&c| members[c]).collect();
                }
                Lane { parents, children }
            })
            .collect();
        Arc::new(lanes)
    }
}

/// This rank's rank in a view of `members` of a communicator of `size` ranks where it is
/// `rank`, or what is wrong with `members`.
fn check_members(rank: usize, size: usize, members: &[usize]) -> Result<usize, CommError> {
    if members.is_empty() {
        return Err(CommError::Usage(
            "a communicator view needs at least one member".into(),
        ));
    }
    let mut seen = vec![false; size];
    for (i, &m) in members.iter().enumerate() {
        if m >= size {
            return Err(CommError::Usage(format!(
                "view member {i} is rank {m}, not a rank of this {size}-rank communicator"
            )));
        }
        if std::mem::replace(&mut seen[m], true) {
            return Err(CommError::Usage(format!(
                "rank {m} is listed twice among the view's members"
            )));
        }
    }
    members.iter().position(|&m| m == rank).ok_or_else(|| {
        CommError::Usage(format!(
            "this rank ({rank}) is not among the view's members {members:?}: only members make a view"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::check_members;

    #[test]
    fn members_must_be_distinct_ranks_in_range_including_this_one() {
        assert_eq!(check_members(2, 4, &[3, 2, 0]).unwrap(), 1);
        let e = |r, s, m: &[usize]| check_members(r, s, m).unwrap_err().to_string();
        assert!(e(0, 4, &[]).contains("at least one member"));
        assert!(e(0, 4, &[0, 4]).contains("rank 4, not a rank of this 4-rank"));
        assert!(e(0, 4, &[0, 2, 2]).contains("rank 2 is listed twice"));
        assert!(e(1, 4, &[0, 2]).contains("this rank (1) is not among"));
    }
}
