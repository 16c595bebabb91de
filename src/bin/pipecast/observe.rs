//! How one rank learns its own switch and port (`pipecast topo discover`'s I/O): ask the host's
//! lldpd, or listen for one LLDPDU on the wire. The parsing and the assembly of the topology
//! are pure, in `pipecast::topology::discover`.

use pipecast::topology::discover::{self, DiscoverError, Observation};
use pipecast::transport::lldp_socket::{ethernet_interfaces, LldpSocket};
use pipecast::wire::lldp;
use std::path::Path;
use std::time::{Duration, Instant};

/// lldpd's default control socket.
pub const LLDPD_SOCKET: &str = "/run/lldpd.socket";

/// The MAC address of interface `iface`, from sysfs.
fn interface_mac(iface: &str) -> Option<String> {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/address"))
        .ok()
        .map(|s| s.trim().to_string())
}

/// Asks the host's own lldpd through its control socket (default [`LLDPD_SOCKET`]), if it
/// runs, about `iface` (default: any interface). Only neighbours on interfaces of this network
/// namespace count (the socket path may reach another namespace's lldpd).
pub fn observe_with_lldpd(
    machine: &str,
    socket: Option<&Path>,
    iface: Option<&str>,
) -> Option<Observation> {
    let socket = socket.unwrap_or(Path::new(LLDPD_SOCKET));
    if !socket.exists() {
        return None;
    }
    let out = std::process::Command::new("lldpcli")
        .arg("-u")
        .arg(socket)
        .args(["-f", "json0", "show", "neighbors"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let mut o = discover::lldpd_observation(
        machine,
        &String::from_utf8_lossy(&out.stdout),
        iface,
        |name| Path::new("/sys/class/net").join(name).exists(),
    )?;
    o.mac = o.interface.as_deref().and_then(interface_mac);
    Some(o)
}

/// Listens on `iface` (or every Ethernet interface that is up) for up to `timeout` and takes
/// the first valid LLDPDU (one LLDP interval is enough: 30 s by default, 1 s in the lab).
pub fn observe_by_listening(
    machine: &str,
    timeout: Duration,
    iface: Option<&str>,
) -> Result<Observation, DiscoverError> {
    let mut interfaces = ethernet_interfaces();
    if let Some(only) = iface {
        interfaces.retain(|(name, _)| name == only);
        if interfaces.is_empty() {
            return Err(DiscoverError::Listen(format!(
                "interface {only} is not an Ethernet interface that is up here"
            )));
        }
    }
    let indexes: Vec<u32> = interfaces.iter().map(|(_, i)| *i).collect();
    let socket = LldpSocket::open(&indexes).map_err(|e| DiscoverError::Listen(e.to_string()))?;
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(rx) = socket
            .recv(left)
            .map_err(|e| DiscoverError::Listen(e.to_string()))?
        else {
            return Ok(Observation::unheard(machine));
        };
        let Ok((_, repr)) = lldp::parse_frame(&rx.frame) else {
            tracing::debug!("ignoring a malformed LLDP frame");
            continue;
        };
        // The socket hears every interface; keep only the chosen ones.
        let Some(iface) = interfaces
            .iter()
            .find(|(_, i)| *i == rx.ifindex)
            .map(|(n, _)| n.clone())
        else {
            continue;
        };
        let iface = Some(iface);
        return Ok(Observation {
            rails: Vec::new(),
            machine: machine.into(),
            switch: Some(repr.switch_name()),
            port: Some(repr.port_text()),
            mac: iface.as_deref().and_then(interface_mac),
            interface: iface,
            source: "listen".into(),
        });
    }
}
