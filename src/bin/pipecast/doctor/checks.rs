//! The checks of `pipecast doctor`, each a real probe: the system call pipecast itself would
//! make (a packet socket, an io_uring, a user namespace, a cross-memory read between two
//! sibling processes, a memfd ring), or the file the kernel reports a setting in.

use super::{component, Check};
use crate::observe::{observe_by_listening, observe_with_lldpd};
use pipecast::transport::lldp_socket::{ethernet_interfaces, LldpSocket};
use pipecast::transport::raweth::socket::has_cap_net_raw;
use std::path::Path;
use std::time::Duration;

/// The interface pipecast's data would cross.
pub struct DataInterface {
    name: Option<String>,
    /// Why there is none, or why the named one is unusable.
    problem: Option<String>,
}

impl DataInterface {
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }
    fn sys(&self, file: &str) -> Option<String> {
        let name = self.name.as_deref()?;
        std::fs::read_to_string(Path::new("/sys/class/net").join(name).join(file))
            .ok()
            .map(|s| s.trim().to_string())
    }
}

/// The interface of the default route in `/proc/net/route` text.
fn default_route_interface(route: &str) -> Option<String> {
    route.lines().skip(1).find_map(|l| {
        let mut f = l.split_whitespace();
        let (iface, dest) = (f.next()?, f.next()?);
        (dest == "00000000" && iface != "lo").then(|| iface.to_string())
    })
}

/// `named`, else the default route's interface, else the first Ethernet interface that is up.
pub fn data_interface(named: Option<&str>) -> DataInterface {
    if let Some(name) = named {
        let exists = !name.contains('/') && Path::new("/sys/class/net").join(name).exists();
        return DataInterface {
            name: Some(name.to_string()),
            problem: (!exists).then(|| format!("interface {name} does not exist here")),
        };
    }
    let name = std::fs::read_to_string("/proc/net/route")
        .ok()
        .and_then(|r| default_route_interface(&r))
        .or_else(|| ethernet_interfaces().into_iter().next().map(|(n, _)| n));
    DataInterface {
        problem: name
            .is_none()
            .then(|| "no Ethernet interface is up and no default route".to_string()),
        name,
    }
}

/// Every check, in the order of the report.
pub fn all(iface: &DataInterface, lldp_seconds: u64, component_path: Option<&Path>) -> Vec<Check> {
    let raw = cap_net_raw(iface);
    let raw_ok = raw.status == super::Status::Ok;
    vec![
        component::check(component_path),
        raw,
        lldp(iface, lldp_seconds, raw_ok),
        mtu(iface),
        io_uring(),
        tcp_rto_min(),
        user_namespaces(),
        cross_memory_attach(),
        shared_memory(),
        rdma(),
    ]
}

/// A missing or unusable interface: a failure when the user named it, else a warning.
fn no_interface(name: &'static str, iface: &DataInterface) -> Option<Check> {
    let problem = iface.problem.as_ref()?;
    let fix = "name the data interface with --iface NAME (`ip -br link` lists them)";
    Some(if iface.name.is_some() {
        Check::fail(name, problem.clone(), fix)
    } else {
        Check::warn(name, problem.clone(), fix)
    })
}

fn cap_net_raw(iface: &DataInterface) -> Check {
    const NAME: &str = "cap-net-raw";
    let fix = "raw Ethernet (PIPECAST_TRANSPORT=raweth) needs CAP_NET_RAW: run the ranks as root \
               or `setcap cap_net_raw+ep PROGRAM`; without it pipecast uses TCP";
    if let Some(c) = no_interface(NAME, iface) {
        return c;
    }
    let index: u32 = iface
        .sys("ifindex")
        .and_then(|i| i.parse().ok())
        .unwrap_or(0);
    let cap = if has_cap_net_raw() { "has" } else { "lacks" };
    match LldpSocket::open(&[index]) {
        Ok(_) => Check::ok(
            NAME,
            format!(
                "this process {cap} CAP_NET_RAW and opened a packet socket on {}",
                iface.name().unwrap_or("?")
            ),
        ),
        Err(e) => Check::warn(
            NAME,
            format!("this process {cap} CAP_NET_RAW; a packet socket was refused: {e}"),
            fix,
        ),
    }
}

fn lldp(iface: &DataInterface, seconds: u64, may_listen: bool) -> Check {
    const NAME: &str = "lldp";
    if let Some(c) = no_interface(NAME, iface) {
        return c;
    }
    let name = iface.name().unwrap_or("?");
    let fix = "run lldpd on the switches (or enable LLDP in their firmware) so that `pipecast \
               topo discover` can place this host; otherwise give the topology as a file \
               (`pipecast topo import`, `pipecast topo gen`)";
    let heard = |o: &pipecast::topology::discover::Observation, how: &str| {
        Check::ok(
            NAME,
            format!(
                "{how} on {name}: switch {}, port {}",
                o.switch.as_deref().unwrap_or("?"),
                o.port.as_deref().unwrap_or("?")
            ),
        )
    };
    if let Some(o) = observe_with_lldpd("doctor", None, Some(name)) {
        if o.switch.is_some() {
            return heard(&o, "lldpd heard a switch");
        }
    }
    if seconds == 0 {
        return Check::warn(
            NAME,
            format!("the host's lldpd knows no neighbour on {name}, and listening was skipped (--lldp-seconds 0)"),
            fix,
        );
    }
    if !may_listen {
        return Check::warn(
            NAME,
            format!(
                "the host's lldpd knows no neighbour on {name}, and listening needs CAP_NET_RAW"
            ),
            format!("run `pipecast doctor` as root to listen; {fix}"),
        );
    }
    match observe_by_listening("doctor", Duration::from_secs(seconds), Some(name)) {
        Ok(o) if o.switch.is_some() => heard(&o, "an LLDPDU was heard"),
        Ok(_) => Check::warn(
            NAME,
            format!("no LLDPDU on {name} in {seconds} s (switches send one every 30 s by default)"),
            format!("listen one interval with --lldp-seconds 35; {fix}"),
        ),
        Err(e) => Check::warn(NAME, format!("cannot listen on {name}: {e}"), fix),
    }
}

fn mtu(iface: &DataInterface) -> Check {
    const NAME: &str = "mtu";
    if let Some(c) = no_interface(NAME, iface) {
        return c;
    }
    let name = iface.name().unwrap_or("?");
    match iface.sys("mtu").and_then(|m| m.parse::<u32>().ok()) {
        None => Check::warn(NAME, format!("cannot read the MTU of {name}"), "check /sys/class/net"),
        Some(m) if m < 1500 => Check::warn(
            NAME,
            format!("{name}: MTU {m}, below Ethernet's 1500: raw Ethernet frames carry less, TCP segments are smaller"),
            format!("`ip link set dev {name} mtu 1500` (or 9000 where every switch port allows jumbo frames)"),
        ),
        Some(m) if m >= 9000 => Check::ok(NAME, format!("{name}: MTU {m} (jumbo frames)")),
        Some(m) => Check::ok(
            NAME,
            format!("{name}: MTU {m} (jumbo frames, 9000, carry raw Ethernet segments in 6x fewer frames where the switches allow them)"),
        ),
    }
}

fn sysctl(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

fn io_uring() -> Check {
    const NAME: &str = "io-uring";
    match pipecast::transport::uring::Ring::new() {
        Ok(_) => Check::ok(
            NAME,
            "an io_uring was created: TCP sends and receives are batched",
        ),
        Err(e) => {
            let disabled = sysctl("/proc/sys/kernel/io_uring_disabled");
            let fix = match disabled.as_deref() {
                Some("1") | Some("2") => "as root, `sysctl -w kernel.io_uring_disabled=0` (1 allows it only to the io_uring group)".to_string(),
                _ => "use a kernel with io_uring (5.6 or later) and allow io_uring_setup in the container's seccomp profile".to_string(),
            };
            Check::warn(
                NAME,
                format!(
                    "io_uring refused ({e}{}): pipecast falls back to one sendmsg per connection",
                    disabled
                        .map(|d| format!(", kernel.io_uring_disabled={d}"))
                        .unwrap_or_default()
                ),
                fix,
            )
        }
    }
}

/// What pipecast's TCP connections get for `PIPECAST_TCP_RTO_MIN_US`: a new socket's timers
/// set and read back (unset: whether 5 ms would be taken; the connections keep the kernel's).
fn tcp_rto_min() -> Check {
    use pipecast::comm::settings::{parse_rto_min, Settings};
    use pipecast::transport::tcp::timers;
    const NAME: &str = "tcp-rto-min";
    const KERNELS: &str =
        "the kernel's minimum RTO (200 ms unless `ip route ... rto_min` lowers it)";
    let ms = |us: u32| f64::from(us) / 1000.0;
    let wanted = match Settings::from_env().tcp_rto_min_us.as_deref().map(parse_rto_min) {
        None => {
            let would = match timers::probe(timers::RTO_MIN) {
                Ok(t) => format!(
                    "this kernel would take PIPECAST_TCP_RTO_MIN_US=5000 as {} ms",
                    ms(t.rto_min_us)
                ),
                Err(e) => format!("this kernel refuses TCP_RTO_MIN_US ({e})"),
            };
            return Check::ok(
                NAME,
                format!("PIPECAST_TCP_RTO_MIN_US unset: TCP connections keep {KERNELS}; {would}"),
            );
        }
        Some(Err(e)) => {
            return Check::fail(
                NAME,
                format!("PIPECAST_TCP_RTO_MIN_US: {e}"),
                "set PIPECAST_TCP_RTO_MIN_US to microseconds (such as 5000), or 0 (the default) for the kernel's",
            )
        }
        Some(Ok(None)) => {
            return Check::ok(
                NAME,
                format!("PIPECAST_TCP_RTO_MIN_US=0: TCP connections keep {KERNELS}"),
            )
        }
        Some(Ok(Some(w))) => w,
    };
    match timers::probe(wanted) {
        Ok(t) => Check::ok(
            NAME,
            format!(
                "TCP connections retransmit a lost segment after {} ms at least, not 200 ms (asked {} us; delayed acks at most {} ms)",
                ms(t.rto_min_us),
                wanted.as_micros(),
                ms(t.delack_max_us)
            ),
        ),
        Err(e) => Check::warn(
            NAME,
            format!(
                "the kernel refused TCP_RTO_MIN_US={} ({e}): TCP connections keep {KERNELS}",
                wanted.as_micros()
            ),
            "Linux 6.15 or later has the per-socket option (a value over two clock ticks); else, as root, `ip route change ... rto_min 5ms` on the data route",
        ),
    }
}

fn user_namespaces() -> Check {
    const NAME: &str = "user-namespaces";
    if pipecast::lab::find_tool("unshare").is_none() {
        return Check::warn(
            NAME,
            "unshare (util-linux) is not installed: the lab without root cannot start",
            "apt-get install util-linux",
        );
    }
    match pipecast::lab::userns_refusal() {
        None => Check::ok(NAME, "an unprivileged user namespace with its own network was created: `pipecast lab` works without root"),
        Some(why) => Check::warn(NAME, why, "see the sysctl named above; only `pipecast lab` without root needs them"),
    }
}

fn cross_memory_attach() -> Check {
    const NAME: &str = "cross-memory-attach";
    let yama = sysctl("/proc/sys/kernel/yama/ptrace_scope");
    let yama_text = match yama.as_deref() {
        None => "no Yama".to_string(),
        Some(v) => format!("Yama ptrace_scope={v}"),
    };
    match pipecast::transport::shm::probe::cross_memory_attach() {
        Ok(()) => Check::ok(
            NAME,
            format!("{yama_text}; process_vm_readv between sibling processes works: one copy between the ranks of a host"),
        ),
        Err(e) => {
            let fix = match yama.as_deref() {
                Some("1") | Some("2") => "as root, `sysctl -w kernel.yama.ptrace_scope=0`, or give the ranks CAP_SYS_PTRACE".to_string(),
                Some(v) if v != "0" => "ptrace_scope 3 cannot be lowered before a reboot: set kernel.yama.ptrace_scope=0 at boot".to_string(),
                _ => "allow process_vm_readv in the container's seccomp profile (e.g. `docker run --cap-add SYS_PTRACE`)".to_string(),
            };
            Check::warn(
                NAME,
                format!("{yama_text}; {e}: ranks of one host copy twice, through a memfd ring"),
                fix,
            )
        }
    }
}

fn shared_memory() -> Check {
    const NAME: &str = "shared-memory";
    match pipecast::transport::shm::probe::memfd_ring() {
        Ok(()) => Check::ok(NAME, "a memfd ring was created and mapped"),
        Err(e) => Check::fail(
            NAME,
            format!("{e}: ranks of one host cannot share a ring"),
            "allow memfd_create and mmap of shared memory (kernel 3.17 or later; the container's seccomp profile; RLIMIT_MEMLOCK/RLIMIT_AS)",
        ),
    }
}

fn rdma() -> Check {
    const NAME: &str = "rdma";
    let root = Path::new("/sys/class/infiniband");
    let mut devices: Vec<String> = std::fs::read_dir(root)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    devices.sort();
    if devices.is_empty() {
        return Check::warn(
            NAME,
            "no RDMA device (/sys/class/infiniband is empty or absent); pipecast runs over TCP, raw Ethernet and shared memory, and a verbs transport would need one",
            "for RoCE load the NIC's RDMA driver; to try verbs on plain Ethernet, Soft-RoCE: `modprobe rdma_rxe && rdma link add rxe0 type rxe netdev IFACE`",
        );
    }
    let described: Vec<String> = devices
        .iter()
        .map(|d| {
            let port = root.join(d).join("ports/1");
            let read = |f: &str| {
                std::fs::read_to_string(port.join(f))
                    .map(|s| s.trim().to_string())
                    .unwrap_or_else(|_| "?".into())
            };
            format!("{d} ({}, port 1 {})", read("link_layer"), read("state"))
        })
        .collect();
    let active = described.iter().any(|d| d.contains("ACTIVE"));
    if active {
        Check::ok(NAME, described.join(", "))
    } else {
        Check::warn(
            NAME,
            format!("{}: no port is ACTIVE", described.join(", ")),
            "bring the port up (cable, `ip link set IFACE up`, subnet manager for InfiniBand)",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_route_names_the_interface() {
        let route = "Iface\tDestination\tGateway \tFlags\n\
                     eth1\t0000A8C0\t00000000\t0001\n\
                     eth0\t00000000\t0100A8C0\t0003\n";
        assert_eq!(default_route_interface(route).as_deref(), Some("eth0"));
        assert_eq!(default_route_interface("Iface\tDestination\n"), None);
        assert_eq!(default_route_interface(""), None);
    }

    #[test]
    fn a_named_interface_that_does_not_exist_fails_its_checks() {
        let iface = data_interface(Some("no-such-if0"));
        let c = mtu(&iface);
        assert_eq!(c.status, super::super::Status::Fail, "{c:?}");
        assert!(c.detail.contains("no-such-if0"), "{c:?}");
        assert_eq!(lldp(&iface, 0, false).status, super::super::Status::Fail);
    }
}
