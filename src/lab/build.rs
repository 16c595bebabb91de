//! `lab up` and `lab down`: building a lab from a topology and removing it.

use super::command::{self, in_netns, ip, netns_list, netns_pids};
use super::state::{create_run_root, load, run_root, LabState, MachineState, RailNic, SwitchState};
use super::userns::{self, Owner};
use super::{tbf_sizes, LabError};
use crate::topology::{self, Topology};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How to build a lab.
#[derive(Debug, Clone)]
pub struct UpOptions {
    /// Lab name: prefix of every namespace (1–8 letters, digits, '_').
    pub name: String,
    /// Rate of every data link direction in bit/s, unless the topology gives `gbps`.
    pub rate_bits: u64,
    /// MTU of the data links (1500 or 9000).
    pub mtu: u32,
    /// Executable run as `EXE lab announce` in every machine to prime the bridges' MAC tables
    /// (normally the `pipecast` binary itself); `None` skips priming.
    pub announce_exe: Option<PathBuf>,
    /// How long to wait for every switch's lldpd to see its neighbour switches (0: don't).
    pub lldp_wait: Duration,
    /// Set (e.g. by a Ctrl-C handler) to abandon the build; the partial lab is removed.
    pub interrupted: Option<Arc<AtomicBool>>,
    /// The switches' bridges snoop IGMP (`mcast_snooping 1`) and run a querier
    /// (`mcast_querier 1`), so IP multicast reaches only the ports that joined; default off:
    /// every switch floods multicast.
    pub igmp_snooping: bool,
}

impl UpOptions {
    pub fn new(name: impl Into<String>) -> UpOptions {
        UpOptions {
            name: name.into(),
            rate_bits: 100_000_000,
            mtu: 1500,
            announce_exe: None,
            lldp_wait: Duration::from_secs(15),
            interrupted: None,
            igmp_snooping: false,
        }
    }
}

/// The data and management addresses of machine `i` (198.18.0.0/16 and 198.19.0.0/16).
fn addresses(i: usize) -> (String, String) {
    let n = i + 1;
    let (hi, lo) = (n / 256, n % 256);
    (format!("198.18.{hi}.{lo}"), format!("198.19.{hi}.{lo}"))
}

/// The address of machine `i`'s NIC on rail `rail` ≥ 1: one /16 per rail (10.rail.0.0/16),
/// so that each rail is its own network and traffic to a peer's NIC i leaves through NIC i.
fn rail_address(i: usize, rail: usize) -> String {
    let n = i + 1;
    format!("10.{rail}.{}.{}", n / 256, n % 256)
}

/// The switch port of machine `name`'s NIC on `rail`: its name on rail 0, `NAME-r` beyond
/// (rails may share a switch tree, so a switch may hold two NICs of one machine).
fn port_name(name: &str, rail: usize) -> String {
    match rail {
        0 => name.to_string(),
        r => format!("{name}-{r}"),
    }
}

fn check_lab_name(name: &str) -> Result<(), LabError> {
    let ok = (1..=8).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(LabError::BadLabName(name.into()))
    }
}

fn check_ifname(what: &'static str, name: &str) -> Result<(), LabError> {
    let ok = (1..=15).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        && !matches!(name, "eth0" | "mgmt0" | "br0" | "lo" | "mg" | "." | "..");
    if ok {
        Ok(())
    } else {
        Err(LabError::BadName {
            what,
            name: name.into(),
        })
    }
}

/// The plan of a lab before anything is built: names and addresses.
fn plan(topology: &Topology, opts: &UpOptions) -> Result<LabState, LabError> {
    check_lab_name(&opts.name)?;
    if topology.size() > 65_000 {
        return Err(LabError::TooBig(topology.size()));
    }
    if topology.rails() > 9 {
        return Err(LabError::Rails(topology.rails()));
    }
    for s in topology.switches() {
        check_ifname("switch", &s.name)?;
    }
    for m in topology.machines() {
        check_ifname("machine", &m.name)?;
        if topology.rails() > 1 {
            check_ifname("machine", &port_name(&m.name, topology.rails() - 1))?;
        }
        if topology.switch_named(&m.name).is_some() {
            return Err(LabError::NameClash(m.name.clone()));
        }
    }
    let run_dir = run_root().join(&opts.name);
    let lab = &opts.name;
    let switches = topology
        .switches()
        .iter()
        .map(|s| SwitchState {
            name: s.name.clone(),
            netns: format!("{lab}-{}", s.name),
            lldp_socket: run_dir
                .join(format!("{}.sock", s.name))
                .display()
                .to_string(),
        })
        .collect();
    let machines = topology
        .machines()
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let (address, mgmt_address) = addresses(i);
            MachineState {
                name: m.name.clone(),
                netns: format!("{lab}-{}", m.name),
                switch: topology.switches()[m.switch].name.clone(),
                address,
                mgmt_address,
                rails: (1..topology.rails())
                    .map(|rail| RailNic {
                        switch: topology.switches()[topology.nic_switch(i, rail)]
                            .name
                            .clone(),
                        address: rail_address(i, rail),
                    })
                    .collect(),
            }
        })
        .collect();
    Ok(LabState {
        name: opts.name.clone(),
        run_dir: run_dir.display().to_string(),
        rate_bits: opts.rate_bits,
        mtu: opts.mtu,
        mgmt_netns: format!("{lab}-mg"),
        switches,
        machines,
        topology: topology::to_json(topology),
        complete: false,
        owner: Owner::Root,
        igmp_snooping: opts.igmp_snooping,
    })
}

/// Builds a lab from a topology: as root in the machine's own namespaces, otherwise inside a
/// new user namespace ([`userns`]; no lldpd there). On any failure or interruption
/// everything built so far is removed again.
pub fn up(topology: &Topology, opts: &UpOptions) -> Result<LabState, LabError> {
    command::require_tools()?;
    if !(576..=9000).contains(&opts.mtu) {
        return Err(LabError::Command(format!(
            "MTU {} is out of range: use 1500 or 9000",
            opts.mtu
        )));
    }
    let mut state = plan(topology, opts)?;
    let run_dir = PathBuf::from(&state.run_dir);
    if run_dir.exists() {
        return Err(LabError::Exists(opts.name.clone()));
    }
    let root = command::is_root();
    if root {
        let existing = netns_list(&Owner::Root)?;
        if let Some(ns) = state.namespaces().iter().find(|ns| existing.contains(ns)) {
            return Err(LabError::Command(format!(
                "network namespace {ns} already exists: another lab named {} is half built? \
                 remove it with `ip netns del {ns}` or pick another --name",
                opts.name
            )));
        }
    }
    create_run_root()?;
    std::fs::create_dir_all(&run_dir)
        .map_err(|e| LabError::Io(format!("cannot create {}: {e}", run_dir.display())))?;
    if !root {
        // A fresh user namespace: no namespace of another lab can be in the way.
        state.owner = userns::start_keeper().inspect_err(|_| {
            let _ = std::fs::remove_dir_all(&run_dir);
        })?;
    }
    state.save()?;
    match build(topology, opts, &state) {
        Ok(()) => {
            state.complete = true;
            state.save()?;
            Ok(state)
        }
        Err(e) => {
            teardown(&state);
            let interrupted = opts
                .interrupted
                .as_ref()
                .is_some_and(|f| f.load(Ordering::SeqCst));
            // A Ctrl-C also kills the running `ip`/`tc`: report the interruption, not that.
            Err(if interrupted {
                LabError::Interrupted
            } else {
                e
            })
        }
    }
}

/// Runs one `ip` or `tc` command line. The line is split at spaces: every name in it was
/// checked by [`plan`] (no spaces), so it reads like the shell commands of LAB.md.
fn sh(owner: &Owner, tool: &str, line: &str) -> Result<(), LabError> {
    let words: Vec<&str> = line.split_whitespace().collect();
    command::run(owner, tool, &words).map(|_| ())
}

fn build(t: &Topology, opts: &UpOptions, state: &LabState) -> Result<(), LabError> {
    let check = || match &opts.interrupted {
        Some(flag) if flag.load(Ordering::SeqCst) => Err(LabError::Interrupted),
        _ => Ok(()),
    };
    let mtu = opts.mtu;
    let sh = |tool: &str, line: &str| sh(&state.owner, tool, line);
    for ns in state.namespaces() {
        check()?;
        sh("ip", &format!("netns add {ns}"))?;
        // No IPv6 (router solicitations, MLD) in the lab: only the traffic we make.
        sh(
            "ip",
            &format!(
                "netns exec {ns} sysctl -q -w net.ipv6.conf.all.disable_ipv6=1 \
                 net.ipv6.conf.default.disable_ipv6=1"
            ),
        )?;
        sh("ip", &format!("-n {ns} link set lo up"))?;
    }
    // FDB ageing 3600 s (in centiseconds) so that learned MACs outlive long runs. IGMP
    // snooping filters only once a querier exists (started below, once the bridge is up) and
    // has waited one query response interval: 1 s here (10 s by default), set before the
    // querier starts, which takes the interval it finds.
    let snooping = if opts.igmp_snooping {
        "mcast_snooping 1 mcast_query_response_interval 100"
    } else {
        "mcast_snooping 0"
    };
    let bridges = state.switches.iter().map(|s| (&s.netns, snooping));
    for (ns, mcast) in bridges.chain([(&state.mgmt_netns, "mcast_snooping 0")]) {
        sh(
            "ip",
            &format!(
                "-n {ns} link add name br0 type bridge stp_state 0 {mcast} \
                 ageing_time 360000"
            ),
        )?;
    }
    let mg = &state.mgmt_netns;
    sh("ip", &format!("-n {mg} addr add 198.19.255.254/16 dev br0"))?;
    sh("ip", &format!("-n {mg} link set br0 up"))?;
    // One tbf per veth end: the egress of that end is one direction of the link.
    let tbf = |ns: &str, dev: &str, gbps: Option<f64>| {
        let bits = gbps.map_or(opts.rate_bits, |g| (g * 1e9) as u64);
        let (burst, limit) = tbf_sizes(bits, mtu);
        sh(
            "tc",
            &format!(
                "-n {ns} qdisc replace dev {dev} root tbf rate {bits}bit burst {burst} \
                 limit {limit}"
            ),
        )
    };
    for (i, m) in state.machines.iter().enumerate() {
        check()?;
        let (sw, host, port) = (&state.switches[t.switch_of(i)].netns, &m.netns, &m.name);
        sh(
            "ip",
            &format!("-n {sw} link add name {port} type veth peer name eth0 netns {host}"),
        )?;
        sh(
            "ip",
            &format!("-n {sw} link set {port} master br0 mtu {mtu} up"),
        )?;
        sh("ip", &format!("-n {host} link set eth0 mtu {mtu} up"))?;
        sh(
            "ip",
            &format!("-n {host} addr add {}/16 dev eth0", m.address),
        )?;
        tbf(host, "eth0", t.machines()[i].gbps)?;
        tbf(sw, port, t.machines()[i].gbps)?;
        for (r, nic) in m.rails.iter().enumerate() {
            let rail = r + 1;
            let sw = &state.switches[t.nic_switch(i, rail)].netns;
            let (port, dev) = (port_name(port, rail), format!("eth{rail}"));
            sh(
                "ip",
                &format!("-n {sw} link add name {port} type veth peer name {dev} netns {host}"),
            )?;
            sh(
                "ip",
                &format!("-n {sw} link set {port} master br0 mtu {mtu} up"),
            )?;
            sh("ip", &format!("-n {host} link set {dev} mtu {mtu} up"))?;
            sh(
                "ip",
                &format!("-n {host} addr add {}/16 dev {dev}", nic.address),
            )?;
            tbf(host, &dev, t.machines()[i].gbps)?;
            tbf(sw, &port, t.machines()[i].gbps)?;
        }
        sh(
            "ip",
            &format!("-n {mg} link add name {port} type veth peer name mgmt0 netns {host}"),
        )?;
        sh("ip", &format!("-n {mg} link set {port} master br0 up"))?;
        sh("ip", &format!("-n {host} link set mgmt0 up"))?;
        sh(
            "ip",
            &format!("-n {host} addr add {}/16 dev mgmt0", m.mgmt_address),
        )?;
    }
    for link in t.links() {
        check()?;
        let (a, b) = (&state.switches[link.a], &state.switches[link.b]);
        sh(
            "ip",
            &format!(
                "-n {} link add name {} type veth peer name {} netns {}",
                a.netns, b.name, a.name, b.netns
            ),
        )?;
        for (ns, port) in [(&a.netns, &b.name), (&b.netns, &a.name)] {
            sh(
                "ip",
                &format!("-n {ns} link set {port} master br0 mtu {mtu} up"),
            )?;
            tbf(ns, port, link.gbps)?;
        }
    }
    for s in &state.switches {
        sh("ip", &format!("-n {} link set br0 up", s.netns))?;
        if opts.igmp_snooping {
            sh(
                "ip",
                &format!("-n {} link set br0 type bridge mcast_querier 1", s.netns),
            )?;
        }
    }
    if state.owner.runs_lldpd() {
        for s in &state.switches {
            check()?;
            start_lldpd(state, s)?;
        }
        // After LLDP flows every link is up, so the broadcasts reach every bridge.
        if !opts.lldp_wait.is_zero() {
            wait_for_lldp(t, state, opts.lldp_wait, &check)?;
        }
    } else {
        tracing::info!("{}", userns::NO_LLDPD);
    }
    if let Some(exe) = &opts.announce_exe {
        prime_mac_tables(state, exe)?;
    }
    Ok(())
}

/// lldpd in the switch namespace with its own socket, pidfile and configuration (LAB.md).
fn start_lldpd(state: &LabState, s: &SwitchState) -> Result<(), LabError> {
    let dir = PathBuf::from(&state.run_dir);
    let conf = dir.join(format!("{}.conf", s.name));
    let text = format!(
        "configure system hostname {0}\nconfigure system chassisid {0}\n\
         configure lldp tx-interval 1\nconfigure lldp portidsubtype ifname\n",
        s.name
    );
    std::fs::write(&conf, text)
        .map_err(|e| LabError::Io(format!("cannot write {}: {e}", conf.display())))?;
    let pid = dir.join(format!("{}.pid", s.name));
    in_netns(
        &state.owner,
        &s.netns,
        "lldpd",
        &[
            "-u",
            &s.lldp_socket,
            "-p",
            &pid.display().to_string(),
            "-O",
            &conf.display().to_string(),
        ],
    )?;
    Ok(())
}

/// One broadcast from every machine teaches every bridge where each MAC lives (otherwise
/// unknown unicast floods until the first reply).
fn prime_mac_tables(state: &LabState, exe: &std::path::Path) -> Result<(), LabError> {
    let children: Vec<_> = state
        .machines
        .iter()
        .map(|m| {
            command::command(&state.owner, "ip")?
                .args(["netns", "exec", &m.netns])
                .arg(exe)
                .args(["lab", "announce"])
                .spawn()
                .map_err(|e| LabError::Command(format!("cannot run {}: {e}", exe.display())))
        })
        .collect::<Result<_, _>>()?;
    for (mut child, m) in children.into_iter().zip(&state.machines) {
        let status = child.wait().map_err(|e| LabError::Io(e.to_string()))?;
        if !status.success() {
            return Err(LabError::Command(format!(
                "announcing machine {} failed ({status})",
                m.name
            )));
        }
    }
    Ok(())
}

/// Waits until each switch's lldpd lists all its neighbour switches.
fn wait_for_lldp(
    t: &Topology,
    state: &LabState,
    limit: Duration,
    check: &dyn Fn() -> Result<(), LabError>,
) -> Result<(), LabError> {
    let start = Instant::now();
    for (i, s) in state.switches.iter().enumerate() {
        let expected = t.neighbours(i).len();
        loop {
            check()?;
            let out = command::run(
                &Owner::Root,
                "lldpcli",
                &["-u", &s.lldp_socket, "-f", "json0", "show", "neighbors"],
            )
            .unwrap_or_default();
            let seen = topology::lldpd::parse_neighbors(&out)
                .map(|n| {
                    n.iter()
                        .filter(|n| t.switch_named(&n.chassis_name()).is_some())
                        .count()
                })
                .unwrap_or(0);
            if seen >= expected {
                break;
            }
            if start.elapsed() > limit {
                return Err(LabError::LldpTimeout {
                    switch: s.name.clone(),
                    expected,
                    seen,
                    seconds: limit.as_secs(),
                });
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    Ok(())
}

/// Removes lab `name`: stops its processes, deletes its namespaces and its run directory.
pub fn down(name: &str) -> Result<(), LabError> {
    command::require_tools()?;
    let state = load(name)?;
    teardown(&state);
    if state.owner != Owner::Root {
        // The namespaces went with the user namespace.
        return if state.owner.alive() {
            Err(LabError::Command(format!(
                "the user namespace of lab {name} is still held by {:?}",
                state.owner
            )))
        } else {
            Ok(())
        };
    }
    let left: Vec<String> = netns_list(&state.owner)?
        .into_iter()
        .filter(|ns| state.namespaces().contains(ns))
        .collect();
    if !left.is_empty() {
        return Err(LabError::Command(format!(
            "could not delete namespaces {}: try `ip netns del NAME`",
            left.join(", ")
        )));
    }
    Ok(())
}

/// The lab's namespaces that do not exist (e.g. deleted by hand, or after a reboot).
pub fn missing_namespaces(state: &LabState) -> Result<Vec<String>, LabError> {
    if !state.owner.alive() {
        return Ok(state.namespaces());
    }
    let existing = netns_list(&state.owner)?;
    Ok(state
        .namespaces()
        .into_iter()
        .filter(|ns| !existing.contains(ns))
        .collect())
}

/// Best effort: every step runs even if an earlier one failed. A rootless lab's keeper goes
/// last, when nothing runs in its namespaces any more.
fn teardown(state: &LabState) {
    let owner = &state.owner;
    if owner.alive() {
        let namespaces = state.namespaces();
        let pids = |namespaces: &[String]| -> Vec<u32> {
            namespaces
                .iter()
                .flat_map(|ns| netns_pids(owner, ns))
                .collect()
        };
        command::kill(&pids(&namespaces), "TERM");
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline && !pids(&namespaces).is_empty() {
            std::thread::sleep(Duration::from_millis(50));
        }
        command::kill(&pids(&namespaces), "KILL");
        let existing = netns_list(owner).unwrap_or_default();
        for ns in namespaces.iter().filter(|ns| existing.contains(ns)) {
            if let Err(e) = ip(owner, &["netns", "del", ns]) {
                tracing::warn!("{e}");
            }
        }
        owner.stop();
    }
    let _ = std::fs::remove_dir_all(&state.run_dir);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::gen;

    #[test]
    fn plan_names_namespaces_and_addresses() {
        let t = gen::hub(2, 2, false);
        let state = plan(&t, &UpOptions::new("t1")).unwrap();
        assert_eq!(state.switches[0].netns, "t1-s0");
        assert_eq!(
            state.machines[0].netns,
            format!("t1-{}", t.machines()[0].name)
        );
        assert_eq!(state.machines[0].address, "198.18.0.1");
        assert_eq!(addresses(299), ("198.18.1.44".into(), "198.19.1.44".into()));
        assert_eq!(state.namespaces().len(), 3 + 6 + 1);
    }

    #[test]
    fn plan_gives_each_nic_its_rail_switch_and_network() {
        let t = crate::topology::gen::rails(2, 1, 2, false);
        let state = plan(&t, &UpOptions::new("r")).unwrap();
        let m = &state.machines[2];
        assert_eq!(m.rails.len(), 1);
        assert_eq!(m.rails[0].switch, t.switches()[t.nic_switch(2, 1)].name);
        assert_eq!(m.rails[0].address, "10.1.0.3");
        assert_eq!(m.iface().as_deref(), Some("eth0,eth1"));
        assert_eq!(
            plan(&gen::hub(1, 2, false), &UpOptions::new("o"))
                .unwrap()
                .machines[0]
                .iface(),
            None
        );
        assert_eq!(port_name("n3", 1), "n3-1");
        // Past 9 rails (10.r.0.0/16, eth9) the lab says so.
        let t = crate::topology::gen::rails(10, 1, 1, false);
        let e = plan(&t, &UpOptions::new("r")).unwrap_err().to_string();
        assert!(e.contains("10 NICs"), "{e}");
    }

    #[test]
    fn plan_rejects_unusable_names() {
        let t = gen::hub(1, 1, false);
        for bad in ["", "1abc", "toolongname", "a-b"] {
            assert!(plan(&t, &UpOptions::new(bad)).is_err(), "{bad}");
        }
        let t = topology::parse_topology(
            r#"{"switches": ["s0"], "machines": [{"name": "s0", "switch": "s0"}]}"#,
        )
        .unwrap();
        assert!(matches!(
            plan(&t, &UpOptions::new("x")),
            Err(LabError::NameClash(_))
        ));
        let t = topology::parse_topology(
            r#"{"switches": ["s0"], "machines": [{"name": "a-very-long-host-name", "switch": "s0"}]}"#,
        )
        .unwrap();
        assert!(matches!(
            plan(&t, &UpOptions::new("x")),
            Err(LabError::BadName { .. })
        ));
        // "mg" would be the management namespace's name.
        let t = topology::parse_topology(
            r#"{"switches": ["s0"], "machines": [{"name": "mg", "switch": "s0"}]}"#,
        )
        .unwrap();
        assert!(matches!(
            plan(&t, &UpOptions::new("x")),
            Err(LabError::BadName { .. })
        ));
    }
}
