//! The host's IPv4 interfaces (`getifaddrs`), for choosing the address a rank listens on.

use std::ffi::CStr;
use std::net::Ipv4Addr;

/// One IPv4 address of one interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipv4Interface {
    /// Interface name, e.g. `eth0`.
    pub name: String,
    pub addr: Ipv4Addr,
    /// Prefix length of the netmask (`/16`).
    pub prefix: u8,
    /// `IFF_UP` is set.
    pub up: bool,
    /// `IFF_LOOPBACK` is set.
    pub loopback: bool,
}

/// Every IPv4 address of every interface, in the order the kernel lists them (interface
/// index order on Linux).
pub fn ipv4_interfaces() -> std::io::Result<Vec<Ipv4Interface>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head into `head`; on success we free it below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_addr is non-NULL and points to a sockaddr of the family it names.
        let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        if family != libc::AF_INET {
            continue;
        }
        // SAFETY: AF_INET addresses are sockaddr_in; the netmask (if any) has the same family.
        let (addr, mask) = unsafe {
            let a = &*ifa.ifa_addr.cast::<libc::sockaddr_in>();
            let m = (!ifa.ifa_netmask.is_null()).then(|| {
                (*ifa.ifa_netmask.cast::<libc::sockaddr_in>())
                    .sin_addr
                    .s_addr
            });
            (a.sin_addr.s_addr, m)
        };
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        let flags = ifa.ifa_flags;
        out.push(Ipv4Interface {
            name,
            addr: Ipv4Addr::from(u32::from_be(addr)),
            prefix: mask.map_or(32, |m| u32::from_be(m).count_ones() as u8),
            up: flags & libc::IFF_UP as u32 != 0,
            loopback: flags & libc::IFF_LOOPBACK as u32 != 0,
        });
    }
    // SAFETY: `head` came from a successful getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_loopback() {
        let all = ipv4_interfaces().unwrap();
        let lo = all.iter().find(|i| i.addr == Ipv4Addr::LOCALHOST);
        // Every Linux network namespace has `lo`; it is up except in a fresh namespace.
        if let Some(lo) = lo {
            assert!(lo.loopback, "{lo:?}");
            assert_eq!(lo.prefix, 8, "{lo:?}");
        }
    }
}
