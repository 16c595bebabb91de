//! Where ranks run on the lab's machines: with K ranks per machine, rank r runs on machine
//! r / K (block placement). That is the order in which a topology file's `ranks` fill its
//! machines (`topology::hosts::expand`, machine 0's ranks first), so the plan `pipecast plan
//! --ranks-per-machine K` prints is the one the job runs, and it is mpirun's default by-slot
//! mapping over a hostfile with K slots per machine ([`super::hostfile`]).

use super::LabError;
use crate::topology::hosts::MAX_RANKS_PER_MACHINE;

/// K ranks on each of `machines` machines: the machine of every rank, in rank order.
pub fn block(machines: usize, per_machine: usize) -> Result<Vec<usize>, LabError> {
    if !(1..=MAX_RANKS_PER_MACHINE).contains(&per_machine) {
        return Err(LabError::Command(format!(
            "--ranks-per-machine {per_machine}: use a whole number from 1 to {MAX_RANKS_PER_MACHINE}"
        )));
    }
    Ok((0..machines * per_machine)
        .map(|r| r / per_machine)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_fill_machines_in_blocks() {
        assert_eq!(block(3, 1).unwrap(), [0, 1, 2]);
        assert_eq!(block(3, 2).unwrap(), [0, 0, 1, 1, 2, 2]);
        assert_eq!(block(2, 3).unwrap(), [0, 0, 0, 1, 1, 1]);
        assert!(block(2, 0).is_err());
        assert!(block(2, MAX_RANKS_PER_MACHINE + 1).is_err());
    }

    #[test]
    fn placement_is_the_topology_files_rank_order() {
        use crate::topology::{gen, hosts};
        let file = gen::hub(1, 2, true);
        let t = hosts::expand(&file, Some(3)).unwrap();
        let h = t.hosts().unwrap();
        let placed = block(file.size(), 3).unwrap();
        for (r, &m) in placed.iter().enumerate() {
            assert_eq!(h.name(h.host_of(r)), file.machines()[m].name);
        }
    }
}
