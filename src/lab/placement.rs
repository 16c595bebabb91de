//! Where ranks run on the lab's machines: machine 0's ranks first, then machine 1's, and so
//! on (block placement). With K ranks per machine, rank r runs on machine r / K. That is the
//! order in which a topology file's `ranks` fill its machines (`topology::hosts::expand`), so
//! the plan `pipecast plan --ranks-per-machine K` prints is the one the job runs, and it is
//! mpirun's default by-slot mapping over a hostfile with K slots per machine
//! ([`super::hostfile`]). Without K, `lab run` and `lab mpirun` place the file's own `ranks`
//! ([`machine_ranks`], [`fill`]): a job whose hosts hold different numbers of ranks (issue 11's
//! 1, 2 and 3).

use super::{LabError, LabState};
use crate::topology::hosts::MAX_RANKS_PER_MACHINE;

/// How many ranks run on each of the lab's machines: `per_machine` on every one, or without
/// it the `ranks` of the topology file the lab was built from (1 where it gives none).
/// Checked as [`block`] and [`fill`] check them.
pub fn machine_ranks(state: &LabState, per_machine: Option<usize>) -> Result<Vec<usize>, LabError> {
    let ranks = match per_machine {
        Some(k) => {
            check_per_machine(k)?;
            vec![k; state.machines.len()]
        }
        None => state.file_ranks(),
    };
    check_counts(&ranks)?;
    Ok(ranks)
}

/// K ranks on each of `machines` machines: the machine of every rank, in rank order.
pub fn block(machines: usize, per_machine: usize) -> Result<Vec<usize>, LabError> {
    check_per_machine(per_machine)?;
    fill(&vec![per_machine; machines])
}

/// `ranks[m]` ranks on machine m (a topology file's `ranks`, in file order): the machine of
/// every rank, in rank order.
pub fn fill(ranks: &[usize]) -> Result<Vec<usize>, LabError> {
    check_counts(ranks)?;
    Ok(ranks
        .iter()
        .enumerate()
        .flat_map(|(m, &k)| std::iter::repeat_n(m, k))
        .collect())
}

/// `--ranks-per-machine K` within 1..=[`MAX_RANKS_PER_MACHINE`].
fn check_per_machine(k: usize) -> Result<(), LabError> {
    if (1..=MAX_RANKS_PER_MACHINE).contains(&k) {
        return Ok(());
    }
    Err(LabError::Command(format!(
        "--ranks-per-machine {k}: use a whole number from 1 to {MAX_RANKS_PER_MACHINE}"
    )))
}

/// Every machine's rank count within 1..=[`MAX_RANKS_PER_MACHINE`].
fn check_counts(ranks: &[usize]) -> Result<(), LabError> {
    match ranks
        .iter()
        .enumerate()
        .find(|(_, k)| !(1..=MAX_RANKS_PER_MACHINE).contains(*k))
    {
        None => Ok(()),
        Some((m, k)) => Err(LabError::Command(format!(
            "machine {m} has {k} ranks: use a whole number from 1 to {MAX_RANKS_PER_MACHINE}"
        ))),
    }
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
    fn a_lab_runs_k_ranks_per_machine_or_its_files_ranks() {
        let mut state = crate::lab::state::sample_state();
        assert_eq!(machine_ranks(&state, Some(2)).unwrap(), [2, 2]);
        assert_eq!(machine_ranks(&state, None).unwrap(), [1, 1]);
        state.topology =
            serde_json::json!({"machines": [{"name": "h0", "ranks": 3}, {"name": "h1"}]});
        assert_eq!(machine_ranks(&state, None).unwrap(), [3, 1]);
        assert!(machine_ranks(&state, Some(0)).is_err());
        state.topology["machines"][1]["ranks"] = serde_json::json!(0);
        assert!(machine_ranks(&state, None).is_err());
    }

    #[test]
    fn uneven_ranks_fill_machines_in_file_order() {
        assert_eq!(fill(&[1, 2, 3]).unwrap(), [0, 1, 1, 2, 2, 2]);
        assert_eq!(fill(&[3, 1, 2]).unwrap(), [0, 0, 0, 1, 2, 2]);
        let e = fill(&[1, 0]).unwrap_err().to_string();
        assert!(e.contains("machine 1 has 0 ranks"), "{e}");
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
        // Uneven `ranks` in the file: the same order.
        let file = crate::topology::parse_topology(
            r#"{"switches": ["s0"], "machines": [{"name": "a", "switch": "s0"},
                {"name": "b", "switch": "s0", "ranks": 2}, {"name": "c", "switch": "s0", "ranks": 3}]}"#,
        )
        .unwrap();
        let t = hosts::expand(&file, None).unwrap();
        let h = t.hosts().unwrap();
        let ranks: Vec<usize> = file.machines().iter().map(|m| m.ranks).collect();
        let placed = fill(&ranks).unwrap();
        assert_eq!(placed.len(), h.size());
        for (r, &m) in placed.iter().enumerate() {
            assert_eq!(h.name(h.host_of(r)), file.machines()[m].name);
        }
    }
}
