//! Who is at which MAC address: raw Ethernet's table of its peers' NICs, per rail, from the
//! bootstrap, and the checks that keep it unambiguous.
//!
//! Ranks of one host may share a NIC, hence a MAC: frames name their sender and receiver
//! rank (wire/frame.rs, version 3), so the table is keyed by (rail, MAC, rank). A peer on this
//! rank's own host that shares one of its MACs is not in the table (the link does not reach
//! it): a frame to the own MAC never comes back from the switch, and such peers are reached
//! over shared memory (the Router). What stays an error: more rails than NICs, a rank without
//! a host, two of this rank's rails with one MAC, a rank with one MAC on two rails, one MAC on
//! two rails (of different ranks of a host), and ranks on different hosts sharing a MAC (a
//! frame to it would reach the wrong host).

use crate::transport::raweth::socket::{mac_to_string, Mac};
use crate::transport::TransportError;
use std::collections::{BTreeMap, BTreeSet};

/// The peers' MAC addresses, as many rails as the bootstrap gave (at least one).
#[derive(Debug, Clone)]
pub struct Addresses {
    /// Every peer's MAC address on each rail, by rank: `macs[rail][rank]` (one MAC may be
    /// several ranks').
    pub macs: Vec<BTreeMap<usize, Mac>>,
    /// Every MAC of `macs[rail]`: a frame from any other is dropped before it is read.
    pub by_mac: Vec<BTreeSet<Mac>>,
    /// The ranks the link reaches: those with a MAC on every rail.
    pub peers: BTreeSet<usize>,
}

impl Addresses {
    /// No peers, on one rail.
    pub fn none() -> Addresses {
        Addresses {
            macs: vec![BTreeMap::new()],
            by_mac: vec![BTreeSet::new()],
            peers: BTreeSet::new(),
        }
    }

    /// The table for rank `me`, whose NICs have MACs `own` (rail r's at r), from every
    /// rank's MAC on each rail (`macs[rail][rank]`) and which host each rank is on
    /// (`hosts[rank]`, any id: ranks with equal ids share a host).
    pub fn of(
        me: usize,
        own: &[Mac],
        macs: Vec<Vec<Mac>>,
        hosts: &[usize],
    ) -> Result<Addresses, TransportError> {
        let setup = |error: String| TransportError::Setup {
            what: "raw Ethernet peers".into(),
            error,
        };
        if macs.len() > own.len() {
            return Err(setup(format!(
                "{} rails of peers for {} NICs",
                macs.len(),
                own.len()
            )));
        }
        if let Some(rank) = (0..macs.iter().map(Vec::len).max().unwrap_or(0))
            .chain([me])
            .find(|&r| r >= hosts.len())
        {
            return Err(setup(format!("rank {rank} has no host")));
        }
        let mut table = Addresses {
            macs: vec![BTreeMap::new(); macs.len().max(1)],
            by_mac: vec![BTreeSet::new(); macs.len().max(1)],
            peers: BTreeSet::new(),
        };
        // Whose each MAC is, and on which rail (the first rank that has it there).
        let mine: BTreeSet<Mac> = own[..macs.len().max(1)].iter().copied().collect();
        if mine.len() < macs.len() {
            return Err(setup("two of this rank's rails share a MAC address".into()));
        }
        let mut seen: BTreeMap<Mac, (usize, usize)> = own[..macs.len().max(1)]
            .iter()
            .enumerate()
            .map(|(rail, &m)| (m, (rail, me)))
            .collect();
        // Peers on this host behind this rank's own NIC: not reached through it.
        let mut behind = BTreeSet::new();
        for (rail, list) in macs.iter().enumerate() {
            for (rank, mac) in list.iter().enumerate() {
                if rank == me {
                    continue;
                }
                let mac_s = mac_to_string(mac);
                match seen.get(mac) {
                    Some(&(_, other)) if other == rank => {
                        return Err(setup(format!(
                            "rank {rank} has MAC {mac_s} on two rails: each rail needs its own NIC"
                        )))
                    }
                    Some(&(_, other)) if hosts[other] != hosts[rank] => {
                        return Err(setup(format!(
                            "ranks {} and {} are on different hosts but share MAC {mac_s}: each host needs its own NIC (ranks of one host may share one)",
                            other.min(rank),
                            other.max(rank),
                        )))
                    }
                    Some(&(first, other)) if first != rail => {
                        return Err(setup(format!(
                            "MAC {mac_s} is rank {other}'s on rail {first} and rank {rank}'s on rail {rail}: each rail needs its own NIC"
                        )))
                    }
                    Some(_) => {}
                    None => {
                        seen.insert(*mac, (rail, rank));
                    }
                }
                if hosts[rank] == hosts[me] && mine.contains(mac) {
                    behind.insert(rank);
                }
            }
        }
        for (rail, list) in macs.into_iter().enumerate() {
            for (rank, mac) in list.into_iter().enumerate() {
                if rank == me || behind.contains(&rank) {
                    continue;
                }
                table.macs[rail].insert(rank, mac);
                table.by_mac[rail].insert(mac);
            }
        }
        table.peers = table.macs[0]
            .keys()
            .copied()
            .filter(|&p| table.macs.iter().all(|m| m.contains_key(&p)))
            .collect();
        Ok(table)
    }

    pub fn rails(&self) -> usize {
        self.macs.len()
    }
}
