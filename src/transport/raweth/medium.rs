//! A MODEL of an Ethernet segment in memory: a switch between [`MemoryPort`]s of one process
//! that delivers each datagram to the port with its destination MAC address through a
//! bounded queue (a datagram to a group MAC — the I/G bit set — to every port that joined the
//! group, [`MemoryPort::join`], but its sender, each copy impaired on its own), so that raw Ethernet's link runs whole, sockets aside, without root or
//! namespaces. A full queue drops what arrives, as a socket's full receive buffer does (the
//! port counts it: [`Port::take_drops`], the link's `kernel_drops`); a frame to a MAC no
//! port has (its process gone) is dropped, as a switch's port to nobody would.
//!
//! With [`Impairments`] it is the *simulated link*: every datagram is dropped, duplicated or
//! delayed (held back for some of its receiver's polls, so that later ones overtake it) at
//! seeded random, and raw Ethernet's lossy-path adapter (`engine::reliable::Lossy`, what the
//! simulator runs over its simulated edges) must recover. Deterministic for one seed and one
//! order of calls. Each port's descriptor (an eventfd) is readable while its queue holds
//! anything (a delayed datagram too), so the link's poll and wake logic runs as on a socket.

use super::port::{Arrived, Port};
use super::socket::{Addressed, Mac};
use super::tx::Batch;
use crate::transport::Wake;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, MutexGuard};

/// What the medium does to datagrams, each drawn per datagram (probabilities in [0, 1]).
/// The default does nothing: a loss-free medium.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Impairments {
    pub drop: f64,
    /// Delivers a second copy (delayed on its own).
    pub duplicate: f64,
    /// Holds a datagram back for 1 to `max_delay` of its receiver's polls: reordering.
    pub delay: f64,
    pub max_delay: u32,
    pub seed: u64,
}

/// What the medium did (monotonic counters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MediumCounters {
    pub delivered: u64,
    pub dropped: u64,
    pub duplicated: u64,
    pub delayed: u64,
    /// To a MAC address no port has.
    pub unknown: u64,
    /// Dropped at a full queue.
    pub overflowed: u64,
}

/// A datagram in a port's queue: its sender, its bytes, and the receiver's poll from which
/// on it may be taken.
struct Queued {
    from: Mac,
    bytes: Vec<u8>,
    due: u64,
}

struct Queue {
    frames: VecDeque<Queued>,
    /// The receiver's polls so far.
    polls: u64,
    drops: u64,
    ready: Arc<Wake>,
}

struct Switch {
    ports: BTreeMap<Mac, Queue>,
    /// Group MAC → the ports that joined it.
    groups: BTreeMap<Mac, std::collections::BTreeSet<Mac>>,
    capacity: usize,
    impair: Impairments,
    rng: ChaCha8Rng,
    counters: MediumCounters,
}

/// The switch; ports made by [`Medium::port`] share it.
#[derive(Clone)]
pub struct Medium {
    switch: Arc<Mutex<Switch>>,
}

impl Medium {
    /// A switch whose ports queue at most `capacity` datagrams each.
    pub fn new(capacity: usize, impair: Impairments) -> Medium {
        Medium {
            switch: Arc::new(Mutex::new(Switch {
                ports: BTreeMap::new(),
                groups: BTreeMap::new(),
                capacity: capacity.max(1),
                impair,
                rng: ChaCha8Rng::seed_from_u64(impair.seed),
                counters: MediumCounters::default(),
            })),
        }
    }

    /// A port at MAC address `mac` taking datagrams of up to `mtu` bytes.
    pub fn port(&self, name: &str, mac: Mac, mtu: usize) -> io::Result<MemoryPort> {
        let ready = Arc::new(Wake::new()?);
        let queue = Queue {
            frames: VecDeque::new(),
            polls: 0,
            drops: 0,
            ready: ready.clone(),
        };
        if lock(&self.switch).ports.insert(mac, queue).is_some() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                "two ports with one MAC address",
            ));
        }
        Ok(MemoryPort {
            switch: self.switch.clone(),
            name: name.to_string(),
            mac,
            mtu,
            ready,
        })
    }

    pub fn counters(&self) -> MediumCounters {
        lock(&self.switch).counters
    }
}

fn lock(switch: &Mutex<Switch>) -> MutexGuard<'_, Switch> {
    // A panic elsewhere leaves queues of bytes, nothing half-changed that matters.
    switch.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether `mac` is a group address (the I/G bit of its first octet).
pub fn is_group(mac: &Mac) -> bool {
    mac[0] & 1 == 1
}

impl Switch {
    /// Puts `bytes` from `from` into `to`'s queue (every member's but the sender's for a
    /// group), impaired.
    fn deliver(&mut self, from: Mac, to: &Mac, bytes: Vec<u8>) {
        if is_group(to) {
            let members: Vec<Mac> = self
                .groups
                .get(to)
                .map(|m| m.iter().copied().filter(|&p| p != from).collect())
                .unwrap_or_default();
            for m in members {
                self.deliver_one(from, &m, bytes.clone());
            }
            return;
        }
        self.deliver_one(from, to, bytes);
    }

    fn deliver_one(&mut self, from: Mac, to: &Mac, bytes: Vec<u8>) {
        let Switch {
            ports,
            groups: _,
            capacity,
            impair,
            rng,
            counters,
        } = self;
        let Some(queue) = ports.get_mut(to) else {
            counters.unknown += 1;
            return;
        };
        if rng.gen_bool(impair.drop) {
            counters.dropped += 1;
            return;
        }
        let copies = if rng.gen_bool(impair.duplicate) {
            counters.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            if queue.frames.len() >= *capacity {
                queue.drops += 1;
                counters.overflowed += 1;
                continue;
            }
            let mut due = queue.polls;
            if impair.max_delay > 0 && rng.gen_bool(impair.delay) {
                due += u64::from(rng.gen_range(1..=impair.max_delay));
                counters.delayed += 1;
            }
            counters.delivered += 1;
            let bytes = bytes.clone();
            queue.frames.push_back(Queued { from, bytes, due });
            queue.ready.notify();
        }
    }
}

/// One port of a [`Medium`]; dropping it unplugs it.
pub struct MemoryPort {
    switch: Arc<Mutex<Switch>>,
    name: String,
    mac: Mac,
    mtu: usize,
    ready: Arc<Wake>,
}

impl MemoryPort {
    /// Receives the datagrams sent to group MAC address `group` from now on.
    pub fn join(&self, group: Mac) {
        lock(&self.switch)
            .groups
            .entry(group)
            .or_default()
            .insert(self.mac);
    }
}

impl Port for MemoryPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn mac(&self) -> Mac {
        self.mac
    }

    fn mtu(&self) -> usize {
        self.mtu
    }

    /// Takes every datagram (a full queue drops at the receiver); one longer than the MTU
    /// fails the call, as `sendmmsg` does (EMSGSIZE).
    fn send(&mut self, frames: &Batch<'_>) -> io::Result<usize> {
        let mut switch = lock(&self.switch);
        for (to, [head, body]) in frames {
            if head.len() + body.len() > self.mtu {
                return Err(io::Error::from_raw_os_error(libc::EMSGSIZE));
            }
            let mut bytes = Vec::with_capacity(head.len() + body.len());
            bytes.extend_from_slice(head);
            bytes.extend_from_slice(body);
            switch.deliver(self.mac, to, bytes);
        }
        Ok(frames.len())
    }

    /// Up to `max` datagrams that are due, in order (a delayed one is overtaken).
    fn receive(&mut self, max: usize, f: &mut dyn FnMut(Arrived<'_>)) -> io::Result<usize> {
        let taken: Vec<Queued> = {
            let mut switch = lock(&self.switch);
            let Some(queue) = switch.ports.get_mut(&self.mac) else {
                return Ok(0);
            };
            queue.polls += 1;
            let polls = queue.polls;
            let mut taken = Vec::new();
            let mut kept = VecDeque::with_capacity(queue.frames.len());
            for q in queue.frames.drain(..) {
                if taken.len() < max.max(1) && q.due <= polls {
                    taken.push(q);
                } else {
                    kept.push_back(q);
                }
            }
            queue.frames = kept;
            if queue.frames.is_empty() {
                queue.ready.clear();
            }
            taken
        };
        for q in &taken {
            f((q.from, Addressed::Us, false, &q.bytes));
        }
        Ok(taken.len())
    }

    fn fd(&self) -> RawFd {
        self.ready.raw()
    }

    fn take_drops(&self) -> u64 {
        let mut switch = lock(&self.switch);
        switch
            .ports
            .get_mut(&self.mac)
            .map_or(0, |q| std::mem::take(&mut q.drops))
    }
}

impl Drop for MemoryPort {
    fn drop(&mut self) {
        let mut switch = lock(&self.switch);
        switch.ports.remove(&self.mac);
        for members in switch.groups.values_mut() {
            members.remove(&self.mac);
        }
    }
}
