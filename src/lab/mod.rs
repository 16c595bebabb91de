//! The emulated multi-switch lab: a real switched Ethernet cluster on one Linux machine, built
//! from network namespaces, bridges, veth pairs, tbf and lldpd (see `../shared/LAB.md`).
//!
//! - a switch is a namespace `<lab>-<switch>` holding bridge `br0`; its ports are named after
//!   the machine or neighbour switch at the other end;
//! - a machine is a namespace `<lab>-<machine>` with data NIC `eth0` (198.18.0.0/16) and
//!   management NIC `mgmt0` (198.19.0.0/16) on the unshaped bridge of namespace `<lab>-mg`;
//!   on a topology with rails (docs/topology.md) NIC i is `eth{i}` (10.i.0.0/16), plugged
//!   into its rail's switch as port `<machine>-i`, and `lab run` sets `PIPECAST_IFACE` to
//!   `eth0,eth1,…`;
//! - every direction of every data link is one tbf (seed 000 §3's full-duplex links, whose
//!   directed edges contend independently);
//! - every switch runs lldpd (chassis ID and system name = switch name, port ID = interface
//!   name, one LLDPDU per second), so the topology can be discovered rather than told.
//!
//! The state of a lab lives in `<run dir>/<lab>/state.json` so that `run`, `exec`, `lldp`,
//! `down` and `status` work from any process. Root builds labs in the machine's own
//! namespaces; an ordinary user builds them inside a user namespace of their own (see
//! [`userns`]: same commands, no lldpd).

#![deny(unsafe_code)]

mod build;
mod command;
mod launch;
mod mpi;
mod placement;
mod state;
mod userns;

pub use build::{down, missing_namespaces, up, UpOptions};
pub use command::{find_tool, is_root, require_tools, uid};
pub use launch::{exec, lldp_dump, run, RankOutcome, RunOptions};
pub use mpi::{
    hostfile, mpiexec_command, mpirun, mpirun5_command, mpirun_command, mpirun_with, ompi5_root,
    rsh, Mpi,
};
pub use placement::{block, fill, machine_ranks};
pub use state::{labs, load, run_root, LabState, MachineState, SwitchState};
pub use userns::{refusal as userns_refusal, Owner, NO_LLDPD};

/// What went wrong building or using a lab.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("{0}")]
    Command(String),
    /// User namespaces refused (the message names the setting to change).
    #[error("{0}")]
    UserNamespaces(String),
    #[error("lab {0}: {NO_LLDPD}")]
    NoLldpd(String),
    #[error("lab {0} is gone: the user namespace that held its namespaces ended (its keeper process was killed, or the machine rebooted); `pipecast lab down --name {0}` removes what is left")]
    Gone(String),
    #[error("{tool} not found: install the Debian package {package} (apt-get install {package})")]
    MissingTool { tool: String, package: String },
    #[error("lab {0:?} already exists: remove it with `pipecast lab down --name {0}` or pick another --name")]
    Exists(String),
    #[error("no lab named {name:?} (no {path}): build it with `pipecast lab up --name {name} --topology FILE`")]
    NoSuchLab { name: String, path: String },
    #[error(
        "lab name {0:?} is not usable: use 1 to 8 letters, digits or '_', starting with a letter"
    )]
    BadLabName(String),
    #[error("{what} name {name:?} cannot name a network interface: use 1 to 15 letters, digits, '_', '.' or '-' (and not eth0, mgmt0, br0, lo, mg)")]
    BadName { what: &'static str, name: String },
    #[error("{0:?} names both a switch and a machine: interface names in the lab must be unique")]
    NameClash(String),
    #[error("rate {0:?} is not a rate the lab shapes: write {spelling}, from 8kbit to 400gbit", spelling = crate::input::RATE_SPELLING)]
    BadRate(String),
    /// A topology whose machines have more NICs (rails, docs/topology.md) than the lab's
    /// naming allows (`eth0`…`eth9`).
    #[error(
        "the topology gives every machine {0} NICs (rails): the lab builds at most 9 per machine"
    )]
    Rails(usize),
    #[error("the lab has {0} machines; it supports at most 65000")]
    TooBig(usize),
    #[error("interrupted: the partly built lab was removed")]
    Interrupted,
    #[error("lldpd of switch {switch} did not see its {expected} neighbour switch(es) within {seconds} s (saw {seen}): check `pipecast lab lldp`")]
    LldpTimeout {
        switch: String,
        expected: usize,
        seen: usize,
        seconds: u64,
    },
    #[error("lab {lab} has no machine {machine:?}: machines are {known}")]
    NoSuchMachine {
        lab: String,
        machine: String,
        known: String,
    },
    #[error("lab state {path}: {reason}")]
    State { path: String, reason: String },
    #[error(transparent)]
    Topology(#[from] crate::topology::TopologyError),
    #[error("{0}")]
    Io(String),
}

/// The rate of the lab's links in bits per second, from 8 kbit/s to 400 Gbit/s, as every rate
/// pipecast takes ([`crate::input::parse_rate`]: `100mbit`, `2.5gbit`, a bare number of Gbit/s);
/// tc is handed the bits, `RATEbit`.
pub fn parse_rate(text: &str) -> Result<u64, LabError> {
    crate::input::parse_rate(text)
        .filter(|bits| (8_000..=400_000_000_000).contains(bits))
        .ok_or_else(|| LabError::BadRate(text.to_string()))
}

/// tbf burst and limit for a rate (LAB.md: a burst under ~1 ms of rate costs TCP throughput;
/// 100 mbit → burst 65536 limit 262144, 1 gbit → burst 125000 limit 1000000).
pub fn tbf_sizes(bits_per_s: u64, mtu: u32) -> (u64, u64) {
    let per_ms = bits_per_s / 8 / 1000;
    let burst = per_ms.max(65_536).max(u64::from(mtu) + 100);
    let limit = (8 * per_ms).max(4 * burst);
    (burst, limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse() {
        assert_eq!(parse_rate("100mbit").unwrap(), 100_000_000);
        assert_eq!(parse_rate("1gbit").unwrap(), 1_000_000_000);
        assert_eq!(parse_rate("2.5Gbit").unwrap(), 2_500_000_000);
        assert_eq!(parse_rate("500kbit").unwrap(), 500_000);
        // A bare number is Gbit/s, as `sim --link-rate` takes it.
        assert_eq!(parse_rate("10").unwrap(), 10_000_000_000);
        assert_eq!(parse_rate("8kbit").unwrap(), 8_000);
        assert_eq!(parse_rate("400gbit").unwrap(), 400_000_000_000);
        for bad in [
            "", "fast", "-1gbit", "0mbit", "nanmbit", "7kbit", "401gbit", "1000", "10gbps",
        ] {
            let e = parse_rate(bad).unwrap_err().to_string();
            assert!(e.contains("100mbit") && e.contains("400gbit"), "{bad}: {e}");
        }
    }

    #[test]
    fn tbf_sizes_follow_lab_notes() {
        assert_eq!(tbf_sizes(100_000_000, 1500), (65_536, 262_144));
        assert_eq!(tbf_sizes(1_000_000_000, 1500), (125_000, 1_000_000));
        let (burst, _) = tbf_sizes(1_000_000, 9000);
        assert!(burst > 9000);
    }
}
