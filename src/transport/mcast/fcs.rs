//! Whether a raw Ethernet interface's link guarantees a frame's payload: a NIC that checks
//! every received frame's FCS (Ethernet's CRC32 over the whole frame) and drops one that
//! fails. Where it does, the raw Ethernet carrier may take data frames whose own CRC covers
//! the header alone ([`flags::HEADER_SUM`](crate::wire::mcast::flags::HEADER_SUM), as UDP's
//! checksum lets the UDP carrier): the payload's CRC was a quarter of a receiving rank's CPU
//! at MTU 9000 (docs/multicast.md, "Receivers' CPU").
//!
//! Asked of the kernel with `SIOCETHTOOL` ([`query`]): the driver and its bus address
//! (`ETHTOOL_GDRVINFO`), and the features `rx-fcs` (frames handed up with their FCS) and
//! `rx-all` (frames with a bad FCS handed up too) by name (`ETHTOOL_GSSET_INFO`,
//! `ETHTOOL_GSTRINGS`, `ETHTOOL_GFEATURES`: feature bits are numbered differently by each
//! kernel, their names are not). [`checks_fcs`] decides, and says no unless every part is
//! known: a physical device on a PCI bus (a bus address `dddd:bb:dd.f`), a driver that is no
//! virtual machine's paravirtual NIC, and both features off. Never on veth (no bus, no FCS:
//! the lab's `netem` could corrupt a frame and nothing would see it), tun, bridges, or a
//! virtual machine's virtio NIC (the host's path is unknown).

use std::io;
use std::os::fd::RawFd;

/// What the kernel says of an interface.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Nic {
    pub driver: String,
    pub bus_info: String,
    /// The features `rx-fcs` and `rx-all`, active or not (`None`: not reported).
    pub rx_fcs: Option<bool>,
    pub rx_all: Option<bool>,
}

/// Drivers of virtual machines' and software interfaces whose frames no NIC of theirs checked
/// (some sit on a PCI bus all the same).
const NOT_A_WIRE: [&str; 16] = [
    "veth",
    "tun",
    "bridge",
    "macvlan",
    "ipvlan",
    "dummy",
    "bonding",
    "team",
    "vxlan",
    "geneve",
    "netkit",
    "virtio_net",
    "vmxnet3",
    "hv_netvsc",
    "xen-netfront",
    "vrf",
];

/// Whether the link of an interface the kernel describes as `nic` guarantees every frame's
/// bytes: a NIC on a PCI bus that checks the FCS and hands up no frame that failed it.
pub fn checks_fcs(nic: &Nic) -> bool {
    is_pci_address(&nic.bus_info)
        && !nic.driver.is_empty()
        && !NOT_A_WIRE.contains(&nic.driver.as_str())
        && nic.rx_fcs == Some(false)
        && nic.rx_all == Some(false)
}

/// `dddd:bb:dd.f` in hexadecimal (a PCI function's address, as ethtool reports bus_info).
fn is_pci_address(s: &str) -> bool {
    let b = s.as_bytes();
    let hex = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_hexdigit);
    b.len() == 12
        && hex(0..4)
        && b[4] == b':'
        && hex(5..7)
        && b[7] == b':'
        && hex(8..10)
        && b[10] == b'.'
        && hex(11..12)
}

const ETHTOOL_GDRVINFO: u32 = 0x03;
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETHTOOL_GFEATURES: u32 = 0x3a;
const ETH_SS_FEATURES: u32 = 4;
const ETH_GSTRING_LEN: usize = 32;
/// More feature names than any kernel has (~70 today): an answer beyond is refused.
const MOST_FEATURES: u32 = 1024;

/// `struct ethtool_drvinfo` (linux/ethtool.h).
#[repr(C)]
struct DrvInfo {
    cmd: u32,
    driver: [u8; 32],
    version: [u8; 32],
    fw_version: [u8; 32],
    bus_info: [u8; 32],
    erom_version: [u8; 32],
    reserved2: [u8; 12],
    n_priv_flags: u32,
    n_stats: u32,
    testinfo_len: u32,
    eedump_len: u32,
    regdump_len: u32,
}

/// One `SIOCETHTOOL` call on interface `ifname` through socket `fd`, with the command's
/// struct in `data` (its first 4 bytes the command).
fn ethtool(fd: RawFd, ifname: &str, data: *mut u8) -> io::Result<()> {
    // SAFETY: an all-zero ifreq is valid; the name is copied in below, shorter than the field.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    let name = ifname.as_bytes();
    if name.len() >= req.ifr_name.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("interface name {ifname:?} too long"),
        ));
    }
    for (d, s) in req.ifr_name.iter_mut().zip(name) {
        *d = *s as libc::c_char;
    }
    req.ifr_ifru.ifru_data = data.cast();
    // SAFETY: SIOCETHTOOL reads the command from `data` and writes at most the struct that
    // command names, which every caller allocated whole (sized by the counts it wrote in).
    if unsafe { libc::ioctl(fd, libc::SIOCETHTOOL, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn c_string(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// Asks the kernel about interface `ifname` through socket `fd` (any socket of the
/// interface's network namespace). An interface without ethtool (the loopback) is an error;
/// features it does not name come back `None`.
pub fn query(fd: RawFd, ifname: &str) -> io::Result<Nic> {
    // SAFETY: DrvInfo is plain integers and byte arrays: all-zero is valid.
    let mut info: DrvInfo = unsafe { std::mem::zeroed() };
    info.cmd = ETHTOOL_GDRVINFO;
    ethtool(fd, ifname, (&mut info as *mut DrvInfo).cast())?;
    let mut nic = Nic {
        driver: c_string(&info.driver),
        bus_info: c_string(&info.bus_info),
        rx_fcs: None,
        rx_all: None,
    };
    // How many feature names: struct ethtool_sset_info { cmd, reserved, sset_mask u64,
    // data[1] }.
    let mut sset = [0u32; 5];
    sset[0] = ETHTOOL_GSSET_INFO;
    sset[2] = 1 << ETH_SS_FEATURES;
    ethtool(fd, ifname, sset.as_mut_ptr().cast())?;
    let count = sset[4];
    if sset[2] & (1 << ETH_SS_FEATURES) == 0 || count == 0 || count > MOST_FEATURES {
        return Ok(nic);
    }
    let n = count as usize;
    // Their names: struct ethtool_gstrings { cmd, string_set, len, data[len * 32] }.
    let mut strings = vec![0u8; 12 + n * ETH_GSTRING_LEN];
    strings[..4].copy_from_slice(&ETHTOOL_GSTRINGS.to_ne_bytes());
    strings[4..8].copy_from_slice(&ETH_SS_FEATURES.to_ne_bytes());
    strings[8..12].copy_from_slice(&count.to_ne_bytes());
    ethtool(fd, ifname, strings.as_mut_ptr())?;
    let name = |i: usize| c_string(&strings[12 + i * ETH_GSTRING_LEN..][..ETH_GSTRING_LEN]);
    // Their state: struct ethtool_gfeatures { cmd, size, features[size] of { available,
    // requested, active, never_changed } }, a bit per feature in blocks of 32.
    let blocks = n.div_ceil(32);
    let mut features = vec![0u32; 2 + 4 * blocks];
    features[0] = ETHTOOL_GFEATURES;
    features[1] = blocks as u32;
    ethtool(fd, ifname, features.as_mut_ptr().cast())?;
    let active = |i: usize| features[2 + 4 * (i / 32) + 2] & (1 << (i % 32)) != 0;
    for i in 0..n {
        match name(i).as_str() {
            "rx-fcs" => nic.rx_fcs = Some(active(i)),
            "rx-all" => nic.rx_all = Some(active(i)),
            _ => {}
        }
    }
    Ok(nic)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nic(driver: &str, bus: &str, fcs: Option<bool>, all: Option<bool>) -> Nic {
        Nic {
            driver: driver.into(),
            bus_info: bus.into(),
            rx_fcs: fcs,
            rx_all: all,
        }
    }

    #[test]
    fn only_a_pci_nic_that_drops_bad_frames_guarantees_the_payload() {
        let off = Some(false);
        assert!(checks_fcs(&nic("mlx5_core", "0000:3b:00.0", off, off)));
        assert!(checks_fcs(&nic("ixgbe", "0000:af:00.1", off, off)));
        // Bad frames handed up, or the FCS kept in the frame: no.
        assert!(!checks_fcs(&nic("ixgbe", "0000:af:00.1", off, Some(true))));
        assert!(!checks_fcs(&nic("ixgbe", "0000:af:00.1", Some(true), off)));
        // Not reported: no.
        assert!(!checks_fcs(&nic("e1000e", "0000:00:1f.6", None, off)));
        assert!(!checks_fcs(&nic("e1000e", "0000:00:1f.6", off, None)));
        // Software and paravirtual interfaces: no, whatever they report.
        assert!(!checks_fcs(&nic("veth", "", off, off)));
        assert!(!checks_fcs(&nic("virtio_net", "virtio0", off, off)));
        assert!(!checks_fcs(&nic("virtio_net", "0000:00:03.0", off, off)));
        assert!(!checks_fcs(&nic("vmxnet3", "0000:0b:00.0", off, off)));
        assert!(!checks_fcs(&nic("bridge", "N/A", off, off)));
        assert!(!checks_fcs(&nic("tun", "tap", off, off)));
        // No driver, or a bus address that is none.
        assert!(!checks_fcs(&nic("", "0000:3b:00.0", off, off)));
        for bus in [
            "",
            "0000:3b:00",
            "0000:3b:00.0x",
            "000g:3b:00.0",
            "usb-0000:00:14.0-1",
        ] {
            assert!(!checks_fcs(&nic("r8152", bus, off, off)), "{bus}");
        }
    }

    /// The query on this machine's interfaces: the loopback has no ethtool driver info, or
    /// none that passes; whatever answers is decided without a panic.
    #[test]
    fn the_loopback_never_passes() {
        use std::os::fd::AsRawFd;
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        if let Ok(nic) = query(sock.as_raw_fd(), "lo") {
            assert!(!checks_fcs(&nic), "{nic:?}");
        }
        assert!(query(-1, "lo").is_err());
        assert!(query(0, "a-name-longer-than-ifnamsiz").is_err());
    }
}
