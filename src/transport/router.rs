//! Several links behind one: a rank reaches the peers on its own host over shared memory and
//! the others over the network. The router gives each link its peers, runs them in one
//! round, and makes the link that waits (the network's) also wake up when another link has
//! something to read, through one `epoll` descriptor that stands for all of them.
//!
//! Each link takes from the driver only the messages to its own peers
//! ([`Driver::next`]), so the router never touches a message itself.

use super::wake::epoll_of;
use super::{Buffer, Buffers, Driver, Link, TransportError};
use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Links, and which one reaches each peer.
pub struct Router {
    links: Vec<Box<dyn Link>>,
    /// `route[peer]`: index into `links`.
    route: Vec<usize>,
    /// Readable when the progress thread's wake descriptor or any non-waiting link is.
    epoll: Option<OwnedFd>,
    /// The progress thread's wake descriptor ([`Link::set_wake`]), to set the waits up again
    /// when the network link comes into use ([`Link::grow`]).
    wake: Option<RawFd>,
}

impl Router {
    /// `links[i]` serves every peer `p` with `route[p] == i` (this rank's own entry is
    /// ignored). The first link is the one that waits; the others must expose their
    /// descriptors ([`Link::wait_fd`]).
    pub fn new(links: Vec<Box<dyn Link>>, route: Vec<usize>) -> Router {
        assert!(
            route.iter().all(|&l| l < links.len()),
            "every route names a link"
        );
        Router {
            links,
            route,
            epoll: None,
            wake: None,
        }
    }

    fn peers_of(&self, link: usize, peers: &[usize]) -> Vec<usize> {
        peers
            .iter()
            .copied()
            .filter(|&p| self.route.get(p) == Some(&link))
            .collect()
    }

    /// Whether the link serves any peer at all.
    fn used(&self, link: usize) -> bool {
        self.route.contains(&link)
    }

    /// Whether the link is in use and needs buffers registered.
    fn registers(&self, link: usize) -> bool {
        self.used(link) && self.links[link].capabilities().needs_registration
    }

    /// The link that waits in a round: the first one in use.
    fn waiter(&self) -> usize {
        (0..self.links.len()).find(|&l| self.used(l)).unwrap_or(0)
    }
}

impl Link for Router {
    fn describe(&self) -> String {
        let used: Vec<String> = (0..self.links.len())
            .filter(|&l| self.used(l))
            .map(|l| self.links[l].describe())
            .collect();
        if used.is_empty() {
            self.links[0].describe()
        } else {
            used.join("+")
        }
    }

    /// The network link's (the first): what shapes segments between hosts; registration is
    /// needed if any link in use needs it.
    fn capabilities(&self) -> super::Capabilities {
        super::Capabilities {
            needs_registration: (0..self.links.len()).any(|l| self.registers(l)),
            ..self.links[0].capabilities()
        }
    }

    /// Registers the buffer with every link in use that needs it.
    fn register(&mut self, seq: u64, buf: &Buffer) -> Result<(), TransportError> {
        for l in 0..self.links.len() {
            if self.registers(l) {
                self.links[l].register(seq, buf)?;
            }
        }
        Ok(())
    }

    fn deregister(&mut self, seq: u64) {
        for l in 0..self.links.len() {
            if self.registers(l) {
                self.links[l].deregister(seq);
            }
        }
    }

    fn connect(&mut self, peers: &[usize], timeout: Duration) -> Result<(), TransportError> {
        for l in 0..self.links.len() {
            let mine = self.peers_of(l, peers);
            if !mine.is_empty() {
                self.links[l].connect(&mine, timeout)?;
            }
        }
        Ok(())
    }

    /// Every link without waiting, then the first one waiting up to `wait` (woken by any
    /// link), then the others again so what arrived meanwhile is handled in this round.
    fn progress(
        &mut self,
        bufs: &mut Buffers,
        driver: &mut dyn Driver,
        clock: &dyn Fn() -> u64,
        wait: Duration,
    ) -> crate::Result<()> {
        let waiter = self.waiter();
        for l in 0..self.links.len() {
            if l != waiter && self.used(l) {
                self.links[l].progress(bufs, driver, clock, Duration::ZERO)?;
            }
        }
        self.links[waiter].progress(bufs, driver, clock, wait)?;
        for l in 0..self.links.len() {
            if l != waiter && self.used(l) {
                self.links[l].progress(bufs, driver, clock, Duration::ZERO)?;
            }
        }
        Ok(())
    }

    /// The waiting link waits on an epoll descriptor holding `fd` and every other link's
    /// descriptor.
    fn set_wake(&mut self, fd: RawFd) {
        self.wake = Some(fd);
        let waiter = self.waiter();
        let others: Vec<RawFd> = (0..self.links.len())
            .filter(|&l| l != waiter && self.used(l))
            .filter_map(|l| self.links[l].wait_fd())
            .collect();
        if others.is_empty() {
            self.links[waiter].set_wake(fd);
            return;
        }
        match epoll_of(&[&[fd], others.as_slice()].concat()) {
            Ok(e) => {
                self.links[waiter].set_wake(e.as_raw_fd());
                self.epoll = Some(e);
            }
            Err(e) => {
                // Without it the waiting link still wakes on `fd` and at the end of each
                // round: slower, never stuck.
                tracing::warn!(error = %e, "epoll_create failed: links wake each other late");
                self.links[waiter].set_wake(fd);
            }
        }
    }

    fn wait_fd(&self) -> Option<RawFd> {
        None
    }

    fn serves_idle(&self) -> bool {
        (0..self.links.len()).any(|l| self.used(l) && self.links[l].serves_idle())
    }

    fn counters(&self) -> BTreeMap<String, u64> {
        let mut all = BTreeMap::new();
        for l in &self.links {
            all.extend(l.counters());
        }
        all
    }

    fn describe_state(&self, now: u64) -> String {
        (0..self.links.len())
            .filter(|&l| self.used(l))
            .map(|l| self.links[l].describe_state(now))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The network link (`links[0]`) grows; the new peers are routed to it.
    fn can_grow(&self) -> bool {
        self.links[0].can_grow()
    }

    /// When the network link was not in use (every peer on this host), it now is: it becomes
    /// the waiting link, and the waits are set up again (its epoll holds the others'
    /// descriptors; the link that waited before keeps the wake descriptor itself, valid).
    fn grow(&mut self, peers: &[super::NewPeer]) -> Result<(), TransportError> {
        self.links[0].grow(peers)?;
        let was_used = self.used(0);
        self.route.extend(peers.iter().map(|_| 0));
        if !was_used && !peers.is_empty() {
            if let Some(fd) = self.wake {
                self.set_wake(fd);
            }
        }
        Ok(())
    }

    fn shutdown(&mut self) {
        for l in &mut self.links {
            l.shutdown();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::recording::{Event, Recording};
    use crate::transport::TcpTransport;

    fn tcp() -> Box<dyn Link> {
        Box::new(TcpTransport::bind(0, "127.0.0.1").unwrap())
    }

    #[test]
    fn registration_goes_only_to_the_links_in_use_that_need_it() {
        let buf = Buffer::Owned(vec![0; 8]);
        let (rec, log) = Recording::new(tcp());
        let mut router = Router::new(vec![tcp(), Box::new(rec)], vec![0, 1, 0]);
        assert!(router.capabilities().needs_registration);
        assert!(router.capabilities().reliable);
        router.register(5, &buf).unwrap();
        router.deregister(5);
        assert_eq!(
            *log.lock().unwrap(),
            [Event::Register(5, 8), Event::Deregister(5)]
        );
        // No peer routed to the registering link: nothing asks for registration.
        let (rec, log) = Recording::new(tcp());
        let mut router = Router::new(vec![tcp(), Box::new(rec)], vec![0, 0, 0]);
        assert!(!router.capabilities().needs_registration);
        router.register(6, &buf).unwrap();
        router.deregister(6);
        assert!(log.lock().unwrap().is_empty());
    }

    /// A router whose peers were all on this host brings its network link into use when it
    /// grows (`comm::grow`): the new peers go to it, the old ones stay where they were.
    #[test]
    fn new_peers_go_to_the_network_link() {
        let mut router = Router::new(vec![tcp(), tcp()], vec![1, 1]);
        assert!(!router.used(0));
        assert!(router.can_grow());
        let peer = super::super::NewPeer {
            id: (7, 0),
            addr: "127.0.0.1:9".parse().unwrap(),
        };
        router.grow(&[peer, peer]).unwrap_err(); // tcp() has no peers set: refused
        let mut net = TcpTransport::bind(0, "127.0.0.1").unwrap();
        net.set_peers(vec!["127.0.0.1:1".parse().unwrap(); 2], 5);
        let mut router = Router::new(vec![Box::new(net), tcp()], vec![1, 1]);
        router.grow(&[peer]).unwrap();
        assert_eq!(router.route, [1, 1, 0]);
        assert!(router.used(0));
        assert_eq!(router.waiter(), 0);
    }
}
