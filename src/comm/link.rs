//! The communicator's choice of transport (TCP or raw Ethernet), what each rank publishes
//! about it in the bootstrap, and [`Link`]: either transport, boxed, for the progress
//! thread.
//!
//! Every rank binds a TCP listener (its address goes into the bootstrap blob). With `raweth`
//! or `auto` it also opens a raw Ethernet socket and puts its MAC in the blob. After the
//! allgather every rank decides the same way from the same blobs: raw Ethernet when every
//! rank published a MAC and no two are equal; otherwise `auto` falls back to TCP (logging
//! why) and `raweth` fails naming the rank.

use super::{CommError, Config};
use crate::transport::raweth::{self, socket, RawEthTransport};
use crate::transport::{TcpTransport, TransportError};
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// Which transport moves broadcast data.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Transport {
    /// TCP between every pair of ranks (default).
    #[default]
    Tcp,
    /// Raw Ethernet frames (EtherType 0x88B5) on `iface`, or when `None` on PIPECAST_IFACE,
    /// else the interface holding the address that reaches the rendezvous, else the first
    /// non-loopback interface with an address. Needs CAP_NET_RAW.
    RawEth { iface: Option<String> },
    /// Raw Ethernet when CAP_NET_RAW is available, an interface is found and every rank has
    /// its own MAC address; TCP otherwise.
    Auto,
}

impl FromStr for Transport {
    type Err = String;
    /// `tcp`, `raweth`, `raweth:IFACE`, `auto`.
    fn from_str(s: &str) -> Result<Transport, String> {
        match s.trim() {
            "tcp" => Ok(Transport::Tcp),
            "auto" => Ok(Transport::Auto),
            "raweth" => Ok(Transport::RawEth { iface: None }),
            t => match t.strip_prefix("raweth:") {
                Some(i) if !i.is_empty() => Ok(Transport::RawEth {
                    iface: Some(i.to_string()),
                }),
                _ => Err(format!(
                    "transport {t:?}: write tcp, raweth, raweth:IFACE (e.g. raweth:eth0) or auto"
                )),
            },
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Transport::Tcp => f.write_str("tcp"),
            Transport::Auto => f.write_str("auto"),
            Transport::RawEth { iface: None } => f.write_str("raweth"),
            Transport::RawEth { iface: Some(i) } => write!(f, "raweth:{i}"),
        }
    }
}

/// The transport the progress thread drives: a boxed trait object, so every call of
/// [`Transport`](crate::transport::Transport) (`register`/`deregister` included) reaches the
/// link inside, or the [`Router`](crate::transport::router::Router) that forwards it.
pub type Link = Box<dyn crate::transport::Transport>;

/// Opens the raw Ethernet side for `config.transport` (`None` for `tcp`, and for `auto` when
/// it is not possible, logging why). `ip` is the address this rank listens on.
pub fn open_raw(
    rank: usize,
    config: &Config,
    ip: Option<IpAddr>,
) -> Result<Option<RawEthTransport>, TransportError> {
    let (iface, required) = match &config.transport {
        Transport::Tcp => return Ok(None),
        Transport::RawEth { iface } => (iface.clone(), true),
        Transport::Auto => (None, false),
    };
    let fallback = |why: String| -> Result<Option<RawEthTransport>, TransportError> {
        tracing::info!(rank, "transport auto: using tcp: {why}");
        Ok(None)
    };
    if !socket::has_cap_net_raw() {
        let why = "raw Ethernet needs the CAP_NET_RAW capability (run as root or `setcap cap_net_raw+ep` the binary)";
        return if required {
            Err(TransportError::Setup {
                what: "transport raweth".into(),
                error: format!("{why}; or use PIPECAST_TRANSPORT=tcp"),
            })
        } else {
            fallback(why.into())
        };
    }
    // PIPECAST_IFACE may list subnets for TCP; only a plain interface name names a raw one.
    let iface = iface
        .or_else(|| config.iface.clone().filter(|i| !i.contains(['/', ','])))
        .or_else(|| socket::default_interface(ip));
    let Some(iface) = iface else {
        let why = "no non-loopback interface with an address: name one with raweth:IFACE or PIPECAST_IFACE";
        return if required {
            Err(TransportError::Setup {
                what: "transport raweth".into(),
                error: why.into(),
            })
        } else {
            fallback(why.into())
        };
    };
    let raw_config = raweth::Config {
        rx_ring: config.raweth_ring,
        liveness: config.timeout.as_nanos() as u64,
        ..raweth::Config::default()
    };
    match RawEthTransport::bind(rank, &iface, raw_config) {
        Ok(t) => Ok(Some(t)),
        Err(e) if !required => fallback(e.to_string()),
        Err(e) => Err(e),
    }
}

/// Picks the transport from everybody's blobs (the same choice at every rank) and gives it
/// its peers. `tcp` already has its peers.
pub fn choose(
    transport: &Transport,
    tcp: TcpTransport,
    raw: Option<RawEthTransport>,
    macs: &[Option<socket::Mac>],
    job_cookie: u64,
) -> Result<Link, CommError> {
    let Some(mut raw) = raw else {
        return match transport {
            Transport::RawEth { .. } => Err(CommError::Bootstrap(
                "transport raweth: this rank has no raw Ethernet endpoint".into(),
            )),
            _ => Ok(Box::new(tcp)),
        };
    };
    let missing: Vec<usize> = (0..macs.len()).filter(|&r| macs[r].is_none()).collect();
    let problem = if !missing.is_empty() {
        Some(format!(
            "ranks {missing:?} have no raw Ethernet endpoint (they run with transport tcp, or lack CAP_NET_RAW or an interface: see their logs)"
        ))
    } else {
        let macs: Vec<socket::Mac> = macs.iter().flatten().copied().collect();
        raw.set_peers(macs, job_cookie).err().map(|e| e.to_string())
    };
    match problem {
        None => Ok(Box::new(raw)),
        Some(why) if *transport == Transport::Auto => {
            tracing::info!("transport auto: using tcp: {why}");
            Ok(Box::new(tcp))
        }
        Some(why) => Err(CommError::Bootstrap(format!(
            "transport raweth: {why}; use PIPECAST_TRANSPORT=tcp or auto"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transports_parse_and_print_back() {
        for s in ["tcp", "auto", "raweth", "raweth:eth0"] {
            assert_eq!(s.parse::<Transport>().unwrap().to_string(), s);
        }
        assert_eq!(
            "raweth:eth1".parse::<Transport>().unwrap(),
            Transport::RawEth {
                iface: Some("eth1".into())
            }
        );
        for bad in ["udp", "raweth:", "", "RAW"] {
            let e = bad.parse::<Transport>().unwrap_err();
            assert!(e.contains("raweth:IFACE"), "{e}");
        }
    }

    #[test]
    fn tcp_stays_tcp_and_auto_without_raw_endpoint_is_tcp() {
        let tcp = TcpTransport::bind(0, "127.0.0.1").unwrap();
        let l = choose(&Transport::Auto, tcp, None, &[None, None], 5).unwrap();
        assert_eq!(l.describe(), "tcp");
        assert!(!l.serves_idle());
        assert_eq!(l.capabilities(), crate::transport::Capabilities::default());
        assert!(l.capabilities().reliable);
    }
}
