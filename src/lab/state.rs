//! The record of a lab on disk: `<run root>/<lab>/state.json`.

use super::userns::Owner;
use super::LabError;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// A switch of a lab.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SwitchState {
    pub name: String,
    pub netns: String,
    /// lldpd's control socket (usable from any namespace).
    pub lldp_socket: String,
}

/// A machine of a lab; its rank is its index.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MachineState {
    pub name: String,
    pub netns: String,
    pub switch: String,
    /// Data address on `eth0` (198.18.0.0/16).
    pub address: String,
    /// Management address on `mgmt0` (198.19.0.0/16).
    pub mgmt_address: String,
    /// On a topology with rails: the switch and address of NIC i (`eth{i}`, 10.i.0.0/16)
    /// at index i − 1; empty with one NIC.
    #[serde(default)]
    pub rails: Vec<RailNic>,
}

/// A machine's NIC beyond the first: `eth{rail}` on rail `rail`'s network.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RailNic {
    pub switch: String,
    pub address: String,
}

impl MachineState {
    /// `PIPECAST_IFACE` for a rank on this machine: one interface per rail (`eth0,eth1`),
    /// `None` with one NIC.
    pub fn iface(&self) -> Option<String> {
        (!self.rails.is_empty()).then(|| {
            (0..=self.rails.len())
                .map(|i| format!("eth{i}"))
                .collect::<Vec<_>>()
                .join(",")
        })
    }
}

/// Everything `run`, `exec`, `lldp`, `down` and `status` need to know about a lab.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LabState {
    pub name: String,
    pub run_dir: String,
    /// Default data-link rate in bit/s (links with `gbps` in the file differ).
    pub rate_bits: u64,
    pub mtu: u32,
    pub mgmt_netns: String,
    pub switches: Vec<SwitchState>,
    pub machines: Vec<MachineState>,
    /// The topology the lab was built from, in the topology-file format.
    pub topology: serde_json::Value,
    /// True once `up` finished; a partly built lab can still be taken down.
    pub complete: bool,
    /// Who owns the namespaces: root, or a user namespace (labs built without root).
    #[serde(default)]
    pub owner: Owner,
    /// The switches' bridges snoop IGMP and run a querier (`lab up --igmp-snooping`): IP
    /// multicast reaches only the ports whose hosts joined the group.
    #[serde(default)]
    pub igmp_snooping: bool,
}

impl LabState {
    /// The rate of machine `machine`'s data links in bit/s: its `gbps` in the topology the lab
    /// was built from, else the lab's rate (what `up` shaped them to).
    pub fn machine_rate_bits(&self, machine: usize) -> u64 {
        self.topology["machines"][machine]["gbps"]
            .as_f64()
            .filter(|g| g.is_finite() && *g > 0.0)
            .map_or(self.rate_bits, |g| (g * 1e9) as u64)
    }

    /// `PIPECAST_LINK_RATE` for a process on machine `machine` (`None` where the caller set
    /// one): the rate the lab shaped its links to, which the model's profile derives from
    /// (`comm::network`; a veth reports 10 Gbit/s whatever the shaping).
    pub fn link_rate_env(&self, machine: usize) -> Option<(String, String)> {
        crate::comm::Settings::from_env()
            .link_rate
            .is_none()
            .then(|| {
                (
                    "PIPECAST_LINK_RATE".to_string(),
                    format!("{}bit", self.machine_rate_bits(machine)),
                )
            })
    }

    /// All namespaces of the lab, switches first.
    pub fn namespaces(&self) -> Vec<String> {
        let mut all: Vec<String> = self.switches.iter().map(|s| s.netns.clone()).collect();
        all.extend(self.machines.iter().map(|m| m.netns.clone()));
        all.push(self.mgmt_netns.clone());
        all
    }
    /// The `ranks` of every machine in the topology file the lab was built from (1 where it
    /// gives none; 0, which [`super::fill`] refuses, where it is not a whole number).
    pub fn file_ranks(&self) -> Vec<usize> {
        (0..self.machines.len())
            .map(|m| match &self.topology["machines"][m]["ranks"] {
                serde_json::Value::Null => 1,
                v => v
                    .as_u64()
                    .and_then(|k| usize::try_from(k).ok())
                    .unwrap_or(0),
            })
            .collect()
    }
    pub fn state_path(&self) -> PathBuf {
        Path::new(&self.run_dir).join("state.json")
    }
    pub fn save(&self) -> Result<(), LabError> {
        let path = self.state_path();
        let text = serde_json::to_string_pretty(self).expect("lab state serializes");
        std::fs::write(&path, text).map_err(|e| LabError::State {
            path: path.display().to_string(),
            reason: e.to_string(),
        })
    }
}

/// Where labs keep their state: `$PIPECAST_LAB_DIR`, else `/run/pipecast/lab` for root and
/// `/tmp/pipecast-lab-<uid>` for other users (outside /run, which a rootless lab may cover
/// with its own tmpfs; [`super::userns`]).
pub fn run_root() -> PathBuf {
    // The lab's own setting, not the library's (an exception comm::settings lists).
    std::env::var_os("PIPECAST_LAB_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            if super::is_root() {
                PathBuf::from("/run/pipecast/lab")
            } else {
                std::env::temp_dir().join(format!("pipecast-lab-{}", super::uid()))
            }
        })
}

/// Creates the run root and checks that it belongs to this user: another user's directory in
/// /tmp must not hold our lab's state.
///
/// A user's own run root is mode 0700. Root's is 0711, and so is the `/run/pipecast` above the
/// default one: the switches' lldpd runs as `_lldpd`, and `lldpcli` is set-uid `_lldpd`, so
/// both must pass through to the lab's sockets (with 0700 a fresh machine's first `lab up`
/// waited out its LLDP timeout: `lldpcli` got "Permission denied" on the socket).
pub fn create_run_root() -> Result<PathBuf, LabError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let root = run_root();
    let io = |e: std::io::Error| LabError::Io(format!("cannot create {}: {e}", root.display()));
    let mode = if super::is_root() { 0o711 } else { 0o700 };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(&root)
        .map_err(io)?;
    let owner = std::fs::metadata(&root).map_err(io)?.uid();
    if owner != super::uid() && !super::is_root() {
        return Err(LabError::Io(format!(
            "{} belongs to uid {owner}, not to you: remove it or set PIPECAST_LAB_DIR",
            root.display()
        )));
    }
    if super::is_root() {
        // Directories made by an earlier version with 0700 are opened up for lldpd too; only
        // pipecast's own (the run root, and /run/pipecast when it is the default), never a
        // directory PIPECAST_LAB_DIR points into.
        let mut own = vec![root.clone()];
        if std::env::var_os("PIPECAST_LAB_DIR").is_none() {
            own.extend(root.parent().map(PathBuf::from));
        }
        for dir in own {
            let perms = std::fs::metadata(&dir).map_err(io)?.permissions();
            if perms.mode() & 0o011 != 0o011 {
                let opened = std::fs::Permissions::from_mode((perms.mode() | 0o011) & 0o7777);
                std::fs::set_permissions(&dir, opened).map_err(io)?;
            }
        }
    }
    Ok(root)
}

/// Loads the state of lab `name`.
pub fn load(name: &str) -> Result<LabState, LabError> {
    let path = run_root().join(name).join("state.json");
    if !path.exists() {
        return Err(LabError::NoSuchLab {
            name: name.into(),
            path: path.display().to_string(),
        });
    }
    // Bounded like every input file (PIPECAST_MAX_INPUT_BYTES): the state file lives in a
    // directory other users may be able to write to.
    let text = crate::comm::settings::max_input_bytes()
        .and_then(|limit| crate::input::read_text(&path, limit))
        .map_err(|reason| LabError::State {
            path: path.display().to_string(),
            reason,
        })?;
    serde_json::from_str(&text).map_err(|e| LabError::State {
        path: path.display().to_string(),
        reason: format!(
            "{e}; remove the lab's namespaces by hand (ip netns list) and this directory"
        ),
    })
}

/// Names of the labs with a state file, sorted.
pub fn labs() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(run_root())
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .filter(|e| e.path().join("state.json").is_file())
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[cfg(test)]
pub(crate) fn sample_state() -> LabState {
    let machine = |i: usize, switch: &str| MachineState {
        name: format!("h{i}"),
        netns: format!("t-h{i}"),
        switch: switch.into(),
        address: format!("198.18.0.{}", i + 1),
        mgmt_address: format!("198.19.0.{}", i + 1),
        rails: Vec::new(),
    };
    LabState {
        name: "t".into(),
        run_dir: "/run/pipecast/lab/t".into(),
        rate_bits: 100_000_000,
        mtu: 1500,
        mgmt_netns: "t-mg".into(),
        switches: vec![SwitchState {
            name: "s0".into(),
            netns: "t-s0".into(),
            lldp_socket: "/run/pipecast/lab/t/s0.sock".into(),
        }],
        machines: vec![machine(0, "s0"), machine(1, "s0")],
        topology: serde_json::Value::Null,
        complete: true,
        owner: Owner::Root,
        igmp_snooping: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trips_through_json() {
        let s = sample_state();
        let back: LabState = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
        assert_eq!(s.namespaces(), ["t-s0", "t-h0", "t-h1", "t-mg"]);
    }

    #[test]
    fn file_ranks_default_to_one() {
        let mut s = sample_state();
        assert_eq!(s.file_ranks(), [1, 1]);
        s.topology = serde_json::json!({"machines": [{"name": "h0"}, {"name": "h1", "ranks": 3}]});
        assert_eq!(s.file_ranks(), [1, 3]);
        s.topology["machines"][0]["ranks"] = serde_json::json!("two");
        assert_eq!(s.file_ranks(), [0, 3]);
    }
}
