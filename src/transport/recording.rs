//! A link for tests that needs buffer registration (as the RDMA verbs link does) and records
//! the calls the driver makes: it wraps a real link, which moves the bytes (tests/links.rs).

use super::{Buffer, Buffers, Capabilities, Driver, Link, TransportError};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the driver did to the link, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A buffer's sequence number and length.
    Register(u64, usize),
    Deregister(u64),
    /// A round of `progress` (where all data moves) with the broadcasts' buffers it saw.
    Progress(Vec<u64>),
    /// A round of `progress` saw broadcast `seq`'s buffer unregistered: a bug.
    Unregistered(u64),
}

/// `inner`, but declaring `needs_registration` and recording into a shared log.
pub struct Recording {
    inner: Box<dyn Link>,
    log: Arc<Mutex<Vec<Event>>>,
    registered: BTreeSet<u64>,
}

impl Recording {
    pub fn new(inner: Box<dyn Link>) -> (Recording, Arc<Mutex<Vec<Event>>>) {
        let log = Arc::new(Mutex::new(Vec::new()));
        let link = Recording {
            inner,
            log: log.clone(),
            registered: BTreeSet::new(),
        };
        (link, log)
    }
}

impl Link for Recording {
    fn describe(&self) -> String {
        format!("recording({})", self.inner.describe())
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            needs_registration: true,
            ..self.inner.capabilities()
        }
    }

    fn connect(&mut self, peers: &[usize], timeout: Duration) -> Result<(), TransportError> {
        self.inner.connect(peers, timeout)
    }

    /// Recorded, and passed on (a link that needs no registration takes it as a no-op).
    fn register(&mut self, seq: u64, buf: &Buffer) -> Result<(), TransportError> {
        self.registered.insert(seq);
        let event = Event::Register(seq, buf.len());
        self.log.lock().expect("log").push(event);
        self.inner.register(seq, buf)
    }

    fn deregister(&mut self, seq: u64) {
        self.registered.remove(&seq);
        self.log.lock().expect("log").push(Event::Deregister(seq));
        self.inner.deregister(seq);
    }

    fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        self.inner.wait_fd()
    }

    fn progress(
        &mut self,
        bufs: &mut Buffers,
        driver: &mut dyn Driver,
        clock: &dyn Fn() -> u64,
        wait: Duration,
    ) -> crate::Result<()> {
        let seqs: Vec<u64> = bufs.keys().copied().collect();
        let unregistered = seqs.iter().filter(|s| !self.registered.contains(s));
        let mut log = self.log.lock().expect("log");
        log.extend(unregistered.map(|&s| Event::Unregistered(s)));
        log.push(Event::Progress(seqs));
        drop(log);
        self.inner.progress(bufs, driver, clock, wait)
    }

    fn set_wake(&mut self, fd: std::os::fd::RawFd) {
        self.inner.set_wake(fd)
    }

    fn serves_idle(&self) -> bool {
        self.inner.serves_idle()
    }

    fn counters(&self) -> BTreeMap<String, u64> {
        self.inner.counters()
    }

    fn describe_state(&self, now: u64) -> String {
        self.inner.describe_state(now)
    }

    fn shutdown(&mut self) {
        self.inner.shutdown()
    }
}
