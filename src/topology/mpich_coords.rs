//! MPICH's network coordinates file (`MPIR_CVAR_COORDINATES_FILE`, read by MPICH's
//! `parse_coord_file` in `src/util/mpir_pmi.c`): a header line that MPICH always skips, then one
//! line per rank, `RANK: GROUP SWITCH PORT`, three integers each (`-1` where unknown):
//!
//! ```text
//! # rank: group id, switch id, port number
//! 0: 1 7 -1
//! 1: 1 10 -1
//! ```
//! MPICH builds its topology-aware trees from these (group, then switch). pipecast turns them
//! into the switch tree of seed 000 §3: a switch `g<G>` per group, a leaf switch `g<G>-s<S>`
//! per switch of the group hung under it, and a top switch `fabric` joining the groups when
//! there are several. This is a model where the fabric is not a tree (a dragonfly's groups
//! and the switches inside a group are all joined to each other): a star per group over-states
//! contention, never hides it. Consecutive ranks on one (group, switch, port ≥ 0) share a NIC
//! and become one machine with `ranks`; a port named by non-consecutive ranks cannot be said in
//! a topology file and is reported as a note.

use super::{Link, Machine, Switch, Topology, TopologyError};
use std::collections::BTreeMap;

/// At most this many ranks (a 1,000,000-rank file is ~15 MB, within the input limit).
pub const MAX_RANKS: usize = 1_000_000;

/// One rank's coordinates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coords {
    pub group: i32,
    pub switch: i32,
    /// `None` for MPICH's `-1` (unknown).
    pub port: Option<i32>,
}

/// What is wrong with a coordinates file.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum MpichCoordsError {
    #[error("coordinates file line {line}: {reason}")]
    Line { line: usize, reason: String },
    #[error("the coordinates file lists no rank: after the header line, write one `RANK: GROUP SWITCH PORT` line per rank")]
    Empty,
    #[error("rank {rank} has no line: the file must list every rank from 0 to {last} (it lists {listed})")]
    MissingRank {
        rank: usize,
        last: usize,
        listed: usize,
    },
    #[error("rank {rank} is listed twice (lines {first} and {again})")]
    DuplicateRank {
        rank: usize,
        first: usize,
        again: usize,
    },
    #[error(transparent)]
    Topology(#[from] TopologyError),
}

/// Parses the file: the coordinates of ranks 0…N-1, in rank order.
pub fn parse_mpich_coords(text: &str) -> Result<Vec<Coords>, MpichCoordsError> {
    let mut lines = text.lines().enumerate();
    if let Some((_, header)) = lines.next() {
        if parse_line(header).is_ok() {
            return Err(MpichCoordsError::Line {
                line: 1,
                reason: "MPICH skips the first line of a coordinates file, and this one holds \
                         a rank: put a header line such as `# rank: group id, switch id, port \
                         number` first"
                    .into(),
            });
        }
    }
    let mut by_rank: BTreeMap<usize, (usize, Coords)> = BTreeMap::new();
    for (i, raw) in lines {
        let line = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let (rank, coords) =
            parse_line(raw).map_err(|reason| MpichCoordsError::Line { line, reason })?;
        if rank >= MAX_RANKS {
            return Err(MpichCoordsError::Line {
                line,
                reason: format!(
                    "rank {rank} is past the largest pipecast plans ({})",
                    MAX_RANKS - 1
                ),
            });
        }
        if let Some((first, _)) = by_rank.insert(rank, (line, coords)) {
            return Err(MpichCoordsError::DuplicateRank {
                rank,
                first,
                again: line,
            });
        }
    }
    let listed = by_rank.len();
    let last = match by_rank.keys().next_back() {
        None => return Err(MpichCoordsError::Empty),
        Some(&last) => last,
    };
    if listed != last + 1 {
        let rank = (0..=last).find(|r| !by_rank.contains_key(r)).unwrap_or(0);
        return Err(MpichCoordsError::MissingRank { rank, last, listed });
    }
    Ok(by_rank.into_values().map(|(_, c)| c).collect())
}

/// `RANK: GROUP SWITCH PORT`.
fn parse_line(raw: &str) -> Result<(usize, Coords), String> {
    let (rank, rest) = raw
        .split_once(':')
        .ok_or_else(|| format!("{:?} is not `RANK: GROUP SWITCH PORT`", shorten(raw)))?;
    let rank: usize = rank
        .trim()
        .parse()
        .map_err(|_| format!("rank {:?} is not a whole number", shorten(rank.trim())))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    if fields.len() != 3 {
        return Err(format!(
            "rank {rank} has {} coordinates: MPICH reads exactly three (group, switch, port)",
            fields.len()
        ));
    }
    let mut v = [0i32; 3];
    for (slot, (text, what)) in v
        .iter_mut()
        .zip(fields.iter().zip(["group", "switch", "port"]))
    {
        *slot = text
            .parse()
            .ok()
            .filter(|&n: &i32| n >= -1)
            .ok_or_else(|| {
                format!(
                    "rank {rank}: {what} {:?} is not an integer ≥ -1",
                    shorten(text)
                )
            })?;
    }
    if v[0] < 0 || v[1] < 0 {
        return Err(format!(
            "rank {rank}: group and switch must be known (≥ 0) to place it; only the port may be -1"
        ));
    }
    Ok((
        rank,
        Coords {
            group: v[0],
            switch: v[1],
            port: (v[2] >= 0).then_some(v[2]),
        },
    ))
}

/// At most 40 characters of `s`, for messages.
fn shorten(s: &str) -> String {
    match s.char_indices().nth(40) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// A topology from the coordinates (ranks in order), and notes on what it could not say.
pub fn coords_topology(coords: &[Coords]) -> Result<(Topology, Vec<String>), MpichCoordsError> {
    let mut groups: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    for c in coords {
        let list = groups.entry(c.group).or_default();
        if !list.contains(&c.switch) {
            list.push(c.switch);
        }
    }
    let mut switches = Vec::new();
    let mut links = Vec::new();
    let top = (groups.len() > 1).then(|| {
        switches.push(Switch {
            name: "fabric".into(),
        });
        0
    });
    let mut leaf = BTreeMap::new();
    for (g, list) in &mut groups {
        list.sort_unstable();
        let gs = switches.len();
        switches.push(Switch {
            name: format!("g{g}"),
        });
        if let Some(t) = top {
            links.push(Link {
                a: t,
                b: gs,
                gbps: None,
            });
        }
        for s in list.iter() {
            leaf.insert((*g, *s), switches.len());
            links.push(Link {
                a: gs,
                b: switches.len(),
                gbps: None,
            });
            switches.push(Switch {
                name: format!("g{g}-s{s}"),
            });
        }
    }
    let mut machines: Vec<Machine> = Vec::new();
    let mut last_of_port: BTreeMap<(i32, i32, i32), usize> = BTreeMap::new();
    let mut scattered = Vec::new();
    for (rank, c) in coords.iter().enumerate() {
        if let (Some(p), Some(m)) = (c.port, machines.last_mut()) {
            if rank > 0 && coords[rank - 1] == *c {
                m.ranks += 1;
                continue;
            }
            if last_of_port.contains_key(&(c.group, c.switch, p)) && scattered.len() < 5 {
                scattered.push(format!("rank {rank} (g{}-s{} port {p})", c.group, c.switch));
            }
        }
        if let Some(p) = c.port {
            last_of_port.insert((c.group, c.switch, p), rank);
        }
        let mut m = Machine::new(format!("rank{rank}"), leaf[&(c.group, c.switch)]);
        m.port = c.port.map(|p| p.to_string());
        machines.push(m);
    }
    let mut notes = Vec::new();
    if !scattered.is_empty() {
        notes.push(format!(
            "ranks that share a port but are not consecutive stay separate machines (a topology \
             file gives each machine its ranks in one run), so their shared NIC is not modelled: {}",
            scattered.join(", ")
        ));
    }
    Ok((Topology::new(switches, links, machines)?, notes))
}

/// [`parse_mpich_coords`] then [`coords_topology`].
pub fn import_mpich_coords(text: &str) -> Result<(Topology, Vec<String>), MpichCoordsError> {
    coords_topology(&parse_mpich_coords(text)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "# rank: group id, switch id, port number\n";

    #[test]
    fn two_groups_become_a_fabric_of_stars() {
        let text = format!("{HEADER}0: 1 7 -1\n1: 1 10 -1\n3: 2 3 5\n2: 2 3 5\n\n4: 2 4 0\n");
        let (t, notes) = import_mpich_coords(&text).unwrap();
        let names: Vec<&str> = t.switches().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            ["fabric", "g1", "g1-s7", "g1-s10", "g2", "g2-s3", "g2-s4"]
        );
        assert_eq!(t.links().len(), 6);
        // Ranks 2 and 3 share port 5 of g2-s3: one machine with two ranks.
        let m = t.machines();
        assert_eq!(m.len(), 4);
        assert_eq!(t.ranks(), 5);
        assert_eq!((m[2].name.as_str(), m[2].ranks), ("rank2", 2));
        assert_eq!(m[2].port.as_deref(), Some("5"));
        assert_eq!(m[0].port, None);
        assert_eq!(t.switches()[m[3].switch].name, "g2-s4");
        assert!(notes.is_empty());
    }

    #[test]
    fn one_group_needs_no_fabric_switch_and_scattered_ports_are_noted() {
        let text = format!("{HEADER}0: 0 0 1\n1: 0 1 1\n2: 0 0 1\n");
        let (t, notes) = import_mpich_coords(&text).unwrap();
        assert_eq!(t.switches()[0].name, "g0");
        assert_eq!(t.size(), 3);
        assert_eq!(notes.len(), 1);
        assert!(notes[0].contains("rank 2 (g0-s0 port 1)"), "{notes:?}");
    }

    #[test]
    fn errors_name_the_line_and_the_fix() {
        let e = |t: &str| parse_mpich_coords(t).unwrap_err().to_string();
        assert!(e("0: 1 7 -1\n1: 1 7 -1\n").contains("header line"));
        assert!(e(HEADER).contains("lists no rank"));
        assert!(e("").contains("lists no rank"));
        assert!(e(&format!("{HEADER}0: 1 7\n")).contains("line 2: rank 0 has 2 coordinates"));
        assert!(e(&format!("{HEADER}0 1 7 2\n")).contains("not `RANK: GROUP SWITCH PORT`"));
        assert!(e(&format!("{HEADER}x: 1 7 2\n")).contains("not a whole number"));
        assert!(e(&format!("{HEADER}0: 1 seven 2\n")).contains("switch \"seven\""));
        assert!(e(&format!("{HEADER}0: -1 7 2\n")).contains("group and switch must be known"));
        assert!(e(&format!("{HEADER}0: 1 7 -2\n")).contains("integer ≥ -1"));
        assert!(e(&format!("{HEADER}0: 1 7 1\n0: 1 7 2\n")).contains("lines 2 and 3"));
        let m = e(&format!("{HEADER}0: 1 7 1\n2: 1 7 2\n"));
        assert!(
            m.contains("rank 1 has no line") && m.contains("from 0 to 2"),
            "{m}"
        );
        assert!(e(&format!("{HEADER}1000000: 1 7 1\n")).contains("past the largest"));
        assert!(e(&format!("{HEADER}99999999999999999999: 1 7 1\n")).contains("whole number"));
        let long = "x".repeat(100_000);
        assert!(e(&format!("{HEADER}{long}\n")).len() < 200);
    }
}
