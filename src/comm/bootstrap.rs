//! Bootstrap: the one collective pipecast needs from its host, an allgather of small blobs.
//!
//! The standalone tool's [`TcpRendezvous`] is a tree, not a star: rank 0 only collects every
//! rank's listening address, one short connection at a time, and then every rank keeps streams
//! to its parent and at most [`FANOUT`] children of a [`FANOUT`]-ary tree (rank r's children are
//! r·k+1 … r·k+k). An allgather goes up the tree (each rank sends its subtree's blobs to its
//! parent) and the full list comes back down, so no rank holds more than [`FANOUT`] + 1
//! descriptors of the rendezvous, whatever the job size.

use super::CommError;
use crate::wire::hello;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Allgather of small address blobs. Open MPI implements it with `MPI_Allgather` through a
/// C callback; the standalone tool with [`TcpRendezvous`].
pub trait Bootstrap: Send {
    /// Every rank calls this with its blob; returns all blobs in rank order.
    fn allgather(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, CommError>;
}

/// Largest blob accepted, so a foreign peer cannot make us allocate gigabytes.
const MAX_BLOB: u32 = 1 << 20;
/// How long a rank waits for the hello of a fresh connection.
const HELLO_WAIT: Duration = Duration::from_secs(2);
/// Children per rank in the rendezvous tree.
pub const FANOUT: usize = 8;
/// Longest listening address, as text, a rank may send (an IPv6 address and a port fit).
const MAX_ADDR: u32 = 64;

/// The parent of `rank` in the rendezvous tree (`None` for rank 0).
fn parent(rank: usize) -> Option<usize> {
    (rank > 0).then(|| (rank - 1) / FANOUT)
}

/// The children of `rank` in a job of `size` ranks.
fn children(rank: usize, size: usize) -> std::ops::Range<usize> {
    let first = rank.saturating_mul(FANOUT).saturating_add(1).min(size);
    first..first.saturating_add(FANOUT).min(size)
}

/// How many levels hang below `rank` (0 for a leaf).
fn height(rank: usize, size: usize) -> u32 {
    let (mut r, mut h) = (rank, 0);
    while children(r, size).start < size {
        r = children(r, size).start;
        h += 1;
    }
    h
}

/// Whether `rank` is in the subtree of `top`.
fn in_subtree(mut rank: usize, top: usize) -> bool {
    while rank > top {
        rank = (rank - 1) / FANOUT;
    }
    rank == top
}

/// A TCP rendezvous: rank 0 listens at a known address, and every other rank says hello there
/// with the address of a listener of its own; once all have, each rank is connected by its
/// parent in the tree (see the module). Every allgather then runs along the tree.
pub struct TcpRendezvous {
    rank: usize,
    size: usize,
    /// The stream to the parent (`None` at rank 0).
    up: Option<TcpStream>,
    /// Streams to the children, in rank order ([`children`]).
    down: Vec<TcpStream>,
    /// How long a rank may wait for the slowest one, per level of the tree below it.
    timeout: Duration,
    local_ip: Option<IpAddr>,
}

impl TcpRendezvous {
    /// Joins the rendezvous at `addr` (`host:port`) as `rank` of `size`, waiting up to
    /// `timeout` for everybody.
    pub fn new(
        rank: usize,
        size: usize,
        addr: &str,
        timeout: Duration,
    ) -> Result<TcpRendezvous, CommError> {
        if size == 0 || rank >= size || u32::try_from(size).is_err() {
            return Err(CommError::BadRank { rank, size });
        }
        let bad = |e: std::io::Error| CommError::Bootstrap(format!("rendezvous {addr}: {e}"));
        let deadline = Instant::now() + timeout;
        let (table, listener, local_ip) = if rank == 0 {
            let listener = TcpListener::bind(addr).map_err(bad)?;
            let local_ip = listener.local_addr().ok().map(|a| a.ip());
            let table = gather_addresses(&listener, size, addr, timeout, deadline)?;
            drop(listener);
            (table, None, local_ip)
        } else {
            let (listener, local_ip) = say_hello(rank, size, addr, timeout, deadline)?;
            (Vec::new(), Some(listener), local_ip)
        };
        // Each rank but 0 is connected by its parent, which hands it the address table; the
        // slack covers the ranks that joined last (the tree is built level by level after).
        let (up, table) = match listener {
            Some(l) => {
                let (s, table) = await_parent(&l, rank, size, timeout, deadline + timeout)?;
                (Some(s), table)
            }
            None => (None, table),
        };
        let mut down = Vec::new();
        for child in children(rank, size) {
            let lost = |e: std::io::Error| {
                CommError::Bootstrap(format!(
                    "rendezvous: rank {rank} cannot reach its child rank {child} at {}: {e} (did rank {child} die?)",
                    table[child]
                ))
            };
            let mut s = TcpStream::connect_timeout(&table[child], timeout).map_err(lost)?;
            s.set_nodelay(true).map_err(lost)?;
            s.write_all(&hello::emit(hello::RENDEZVOUS, rank as u64, size as u64))
                .and_then(|()| send_blob(&mut s, &encode_table(&table)))
                .map_err(lost)?;
            down.push(s);
        }
        Ok(TcpRendezvous {
            rank,
            size,
            up,
            down,
            timeout,
            local_ip: local_ip.filter(|ip| !ip.is_unspecified()),
        })
    }

    /// This host's address on the way to the rendezvous: a good address to listen on.
    pub fn local_ip(&self) -> Option<IpAddr> {
        self.local_ip
    }

    /// Sets how long an allgather may wait for the slowest rank (per level of the tree).
    pub fn set_timeout(&mut self, timeout: Duration) -> Result<(), CommError> {
        self.timeout = timeout;
        Ok(())
    }

    /// How many streams this rank keeps (its parent and its children): at most
    /// [`FANOUT`] + 1, whatever the job size.
    pub fn streams(&self) -> usize {
        self.down.len() + usize::from(self.up.is_some())
    }
}

/// Rank 0: accepts one connection at a time until every other rank said hello with its
/// listening address; each connection is closed once read. A stray that says nothing is
/// dropped after [`HELLO_WAIT`].
fn gather_addresses(
    listener: &TcpListener,
    size: usize,
    addr: &str,
    timeout: Duration,
    deadline: Instant,
) -> Result<Vec<SocketAddr>, CommError> {
    let bad = |e: std::io::Error| CommError::Bootstrap(format!("rendezvous {addr}: {e}"));
    let unset = SocketAddr::from(([0, 0, 0, 0], 0));
    let mut table: Vec<Option<SocketAddr>> = (0..size).map(|r| (r == 0).then_some(unset)).collect();
    let mut missing = size - 1;
    while missing > 0 {
        let late = || {
            let missing: Vec<usize> = (1..size).filter(|r| table[*r].is_none()).collect();
            CommError::Bootstrap(format!(
                "ranks {missing:?} did not join the rendezvous at {addr} within {} ms",
                timeout.as_millis()
            ))
        };
        // A rank's first bytes to rank 0: its rank and the job size, then its address.
        let (mut s, from, words) = accept_hello(listener, timeout, deadline, &bad, &late)?;
        let Some((r, n)) = words else {
            tracing::warn!(%from, "rendezvous: dropped a connection that is not a pipecast rank's");
            continue;
        };
        let (r, n) = (r as usize, n as usize);
        if n != size {
            return Err(CommError::Bootstrap(format!(
                "rank {r} says the job has {n} ranks, rank 0 says {size}: set the same PIPECAST_SIZE everywhere"
            )));
        }
        let listens = read_limited(&mut s, MAX_ADDR)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .and_then(|t| t.parse::<SocketAddr>().ok());
        let Some(listens) = listens else {
            tracing::warn!(%from, rank = r, "rendezvous: dropped a hello without a listening address");
            continue;
        };
        match table.get_mut(r) {
            Some(slot @ None) => *slot = Some(listens),
            _ => {
                return Err(CommError::Bootstrap(format!(
                    "rank {r} joined twice or is out of range 1..{size}: give every process its own PIPECAST_RANK"
                )))
            }
        }
        missing -= 1;
        // The rank waits for this byte before it closes its side.
        let _ = s.write_all(&[1]);
    }
    Ok(table.into_iter().map(|a| a.unwrap_or(unset)).collect())
}

/// A rendezvous hello's words: the rank that says it and the job size.
type Hello = (u64, u64);

/// The next connection on `listener` (polled every 2 ms) and its first [`hello::LEN`] bytes
/// as a rendezvous hello (`None`: not one); a stray that connects and says nothing is given
/// up after [`HELLO_WAIT`], so it cannot stall the job. Past `deadline`, `late`'s error.
fn accept_hello(
    listener: &TcpListener,
    timeout: Duration,
    deadline: Instant,
    bad: &dyn Fn(std::io::Error) -> CommError,
    late: &dyn Fn() -> CommError,
) -> Result<(TcpStream, SocketAddr, Option<Hello>), CommError> {
    listener.set_nonblocking(true).map_err(bad)?;
    loop {
        match listener.accept() {
            Ok((mut s, from)) => {
                s.set_nonblocking(false).map_err(bad)?;
                s.set_read_timeout(Some(HELLO_WAIT.min(timeout)))
                    .map_err(bad)?;
                let mut first = [0u8; hello::LEN];
                let words = s
                    .read_exact(&mut first)
                    .ok()
                    .and_then(|()| hello::parse(hello::RENDEZVOUS, &first));
                return Ok((s, from, words));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return Err(late());
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(bad(e)),
        }
    }
}

/// A rank but 0: listens on the address it reaches rank 0 from, and tells rank 0 its rank, the
/// job size and that address. Returns the listener (its parent connects there) and the address.
fn say_hello(
    rank: usize,
    size: usize,
    addr: &str,
    timeout: Duration,
    deadline: Instant,
) -> Result<(TcpListener, Option<IpAddr>), CommError> {
    let bad = |e: std::io::Error| CommError::Bootstrap(format!("rendezvous {addr}: {e}"));
    let target = addr
        .to_socket_addrs()
        .map_err(bad)?
        .next()
        .ok_or_else(|| CommError::Bootstrap(format!("rendezvous {addr}: no address")))?;
    let mut s = loop {
        match TcpStream::connect_timeout(&target, timeout) {
            // A port in the ephemeral range can be "connected" to itself (TCP
            // simultaneous open) while rank 0 is not listening yet: not rank 0.
            Ok(s) if s.local_addr().ok() == s.peer_addr().ok() => {
                drop(s);
                std::thread::sleep(Duration::from_millis(10));
            }
            Ok(s) => break s,
            Err(e) if Instant::now() >= deadline => {
                return Err(CommError::Bootstrap(format!(
                    "rank {rank}: rank 0 is not listening at {addr} ({e}) after {} ms: is PIPECAST_RENDEZVOUS the same for all ranks, and is rank 0 running?",
                    timeout.as_millis()
                )))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    };
    s.set_nodelay(true).map_err(bad)?;
    let local = s.local_addr().map_err(bad)?;
    let listener = TcpListener::bind((local.ip(), 0)).map_err(bad)?;
    let listens = listener.local_addr().map_err(bad)?;
    s.write_all(&hello::emit(hello::RENDEZVOUS, rank as u64, size as u64))
        .and_then(|()| send_blob(&mut s, listens.to_string().as_bytes()))
        .map_err(bad)?;
    // Rank 0's answer: it has read all of it (then both sides close).
    s.set_read_timeout(Some(
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1)),
    ))
    .map_err(bad)?;
    let mut ack = [0u8; 1];
    s.read_exact(&mut ack).map_err(|e| {
        CommError::Bootstrap(format!(
            "rank {rank}: rank 0 at {addr} did not take its hello ({e}): see rank 0's error"
        ))
    })?;
    Ok((listener, Some(local.ip())))
}

/// A rank but 0: waits on its listener for its parent, which says hello and hands over the
/// address table; strays are dropped as at rank 0.
fn await_parent(
    listener: &TcpListener,
    rank: usize,
    size: usize,
    timeout: Duration,
    deadline: Instant,
) -> Result<(TcpStream, Vec<SocketAddr>), CommError> {
    let up = parent(rank).unwrap_or(0);
    let bad = |e: std::io::Error| CommError::Bootstrap(format!("rendezvous: rank {rank}: {e}"));
    let late = || {
        CommError::Bootstrap(format!(
            "rendezvous: rank {rank}: its parent rank {up} did not connect within {} ms (a rank missing? rank 0 says which)",
            timeout.as_millis()
        ))
    };
    loop {
        let (mut s, from, words) = accept_hello(listener, timeout, deadline, &bad, &late)?;
        if words != Some((up as u64, size as u64)) {
            tracing::warn!(%from, rank, "rendezvous: dropped a connection that is not this rank's parent");
            continue;
        }
        s.set_read_timeout(Some(timeout)).map_err(bad)?;
        let table = recv_blob(&mut s)
            .ok()
            .and_then(|b| decode_table(&b, size))
            .ok_or_else(|| {
                CommError::Bootstrap(format!(
                    "rendezvous: rank {rank}: its parent rank {up} sent no valid address table"
                ))
            })?;
        s.set_nodelay(true).map_err(bad)?;
        return Ok((s, table));
    }
}

/// Every rank's listening address, one a line, in rank order.
fn encode_table(table: &[SocketAddr]) -> Vec<u8> {
    table
        .iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join("\n")
        .into_bytes()
}

/// [`encode_table`]'s text: exactly `size` addresses, else `None`.
fn decode_table(b: &[u8], size: usize) -> Option<Vec<SocketAddr>> {
    let text = std::str::from_utf8(b).ok()?;
    let table: Vec<SocketAddr> = text
        .split('\n')
        .map(|l| l.parse().ok())
        .collect::<Option<_>>()?;
    (table.len() == size).then_some(table)
}

fn send_blob(s: &mut TcpStream, blob: &[u8]) -> std::io::Result<()> {
    s.write_all(&(blob.len() as u32).to_le_bytes())?;
    s.write_all(blob)
}

fn recv_blob(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    read_limited(s, MAX_BLOB)
}

/// A length-prefixed blob of at most `most` bytes.
fn read_limited(s: &mut TcpStream, most: u32) -> std::io::Result<Vec<u8>> {
    let len = read_u32(s)?;
    if len > most {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("blob of {len} bytes is larger than {most}"),
        ));
    }
    let mut blob = vec![0; len as usize];
    s.read_exact(&mut blob)?;
    Ok(blob)
}

fn read_u32(s: &mut TcpStream) -> std::io::Result<u32> {
    let mut w = [0u8; 4];
    s.read_exact(&mut w)?;
    Ok(u32::from_le_bytes(w))
}

/// What travels along the tree in an allgather: the blobs of a subtree (up) or of every rank
/// (down), or the news that a rank was lost, which every rank then reports.
enum Message {
    Blobs(Vec<(usize, Vec<u8>)>),
    Lost { rank: usize, why: String },
}

const BLOBS: u8 = 0;
const LOST: u8 = 1;
/// Longest reason a [`Message::Lost`] carries.
const MAX_WHY: usize = 4096;

fn send_blobs(s: &mut TcpStream, blobs: &[(usize, Vec<u8>)]) -> std::io::Result<()> {
    let mut head = vec![BLOBS];
    head.extend((blobs.len() as u32).to_le_bytes());
    s.write_all(&head)?;
    for (r, blob) in blobs {
        s.write_all(&(*r as u32).to_le_bytes())?;
        send_blob(s, blob)?;
    }
    Ok(())
}

fn send_lost(s: &mut TcpStream, rank: usize, why: &str) -> std::io::Result<()> {
    let mut head = vec![LOST];
    head.extend((rank as u32).to_le_bytes());
    s.write_all(&head)?;
    send_blob(s, &why.as_bytes()[..why.len().min(MAX_WHY)])
}

/// A [`Message`] whose blobs are ranks for which `expect` holds, each once and at most
/// `count` of them; anything else is invalid data.
fn recv_message(
    s: &mut TcpStream,
    size: usize,
    count: usize,
    expect: impl Fn(usize) -> bool,
) -> std::io::Result<Message> {
    let invalid = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    let mut kind = [0u8; 1];
    s.read_exact(&mut kind)?;
    match kind[0] {
        BLOBS => {
            let n = read_u32(s)? as usize;
            if n != count {
                return Err(invalid(format!("{n} blobs where {count} were due")));
            }
            let mut seen = std::collections::BTreeSet::new();
            let mut blobs = Vec::with_capacity(n);
            for _ in 0..n {
                let r = read_u32(s)? as usize;
                if r >= size || !expect(r) || !seen.insert(r) {
                    return Err(invalid(format!("a blob of rank {r}, not due here")));
                }
                blobs.push((r, recv_blob(s)?));
            }
            Ok(Message::Blobs(blobs))
        }
        LOST => {
            let rank = read_u32(s)? as usize;
            let why = String::from_utf8_lossy(&read_limited(s, MAX_WHY as u32)?).into_owned();
            if rank >= size {
                return Err(invalid(format!("news of a lost rank {rank}")));
            }
            Ok(Message::Lost { rank, why })
        }
        k => Err(invalid(format!("a message of kind {k}"))),
    }
}

/// How many ranks the subtree of `top` holds.
fn subtree_size(top: usize, size: usize) -> usize {
    let (mut first, mut last, mut n) = (top, top + 1, 0);
    while first < size {
        n += last.min(size) - first;
        first = first.saturating_mul(FANOUT).saturating_add(1);
        last = last.saturating_mul(FANOUT).saturating_add(1);
    }
    n
}

impl Bootstrap for TcpRendezvous {
    fn allgather(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, CommError> {
        let (rank, size) = (self.rank, self.size);
        let lost = |peer: usize, why: &str| {
            CommError::Bootstrap(format!(
                "allgather: lost rank {peer} ({why}): it died or called a different collective"
            ))
        };
        let timeout = self.timeout;
        let wait = |levels: u32| timeout.saturating_mul(levels.saturating_add(1));
        // Up: every child's subtree, then this rank's to the parent. A child that fails is
        // named, and its news goes on; the other children are still read (they are waiting to
        // be), so no stream is left with a message unread.
        let mut news: Option<(usize, String)> = None;
        let mut blobs = vec![(rank, mine.to_vec())];
        for (child, s) in children(rank, size).zip(&mut self.down) {
            let got = s
                .set_read_timeout(Some(wait(height(child, size))))
                .and_then(|()| {
                    recv_message(s, size, subtree_size(child, size), |r| in_subtree(r, child))
                });
            match got {
                Ok(Message::Blobs(b)) => blobs.extend(b),
                Ok(Message::Lost { rank, why }) => {
                    news.get_or_insert((rank, why));
                }
                Err(e) => {
                    news.get_or_insert((child, e.to_string()));
                }
            }
        }
        let all = if let Some(s) = &mut self.up {
            let up = parent(rank).unwrap_or(0);
            let sent = match &news {
                None => send_blobs(s, &blobs),
                Some((rank, why)) => send_lost(s, *rank, why),
            };
            // Down: the whole list, or the news, from the parent.
            let got = sent
                .and_then(|()| s.set_read_timeout(Some(wait(height(0, size).saturating_add(1)))))
                .and_then(|()| recv_message(s, size, size, |_| true));
            // The root's verdict where it arrives, so that every rank names the same rank;
            // this rank's own news only where the parent's word is lost.
            match (got, news.take()) {
                (Ok(Message::Lost { rank, why }), _) => Err((rank, why)),
                (Ok(Message::Blobs(_)), Some(n)) | (Err(_), Some(n)) => Err(n),
                (Ok(Message::Blobs(b)), None) => Ok(b),
                (Err(e), None) => Err((up, e.to_string())),
            }
        } else {
            match news.take() {
                Some(n) => Err(n),
                None => Ok(blobs),
            }
        };
        // Down to the children: what this rank ends with. A child gone meanwhile has its own
        // children report it.
        match all {
            Ok(mut b) => {
                b.sort_by_key(|(r, _)| *r);
                for s in &mut self.down {
                    let _ = send_blobs(s, &b);
                }
                Ok(b.into_iter().map(|(_, blob)| blob).collect())
            }
            Err((peer, why)) => {
                for s in &mut self.down {
                    let _ = send_lost(s, peer, &why);
                }
                Err(lost(peer, &why))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendezvous_allgathers_in_rank_order() {
        let addr = free_addr();
        let threads: Vec<_> = (0..4)
            .map(|r| {
                let addr = addr.clone();
                std::thread::spawn(move || {
                    let mut b = TcpRendezvous::new(r, 4, &addr, Duration::from_secs(5)).unwrap();
                    let first = b.allgather(&[r as u8]).unwrap();
                    let second = b.allgather(&vec![7; r]).unwrap();
                    (first, second)
                })
            })
            .collect();
        for t in threads {
            let (first, second) = t.join().unwrap();
            assert_eq!(first, vec![vec![0], vec![1], vec![2], vec![3]]);
            assert_eq!(second[3], vec![7, 7, 7]);
        }
    }

    /// A stray connection (a web client, a port scanner) is dropped, not fatal.
    #[test]
    fn a_foreign_connection_is_dropped_and_the_job_goes_on() {
        let addr = free_addr();
        let rank0 = rank_0_says_zero(&addr, 2);
        let stray = connect_when_listening(&addr);
        (&stray).write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
        let mut b = TcpRendezvous::new(1, 2, &addr, Duration::from_secs(10)).unwrap();
        assert_eq!(b.allgather(b"one").unwrap()[0], b"zero");
        assert_eq!(rank0.join().unwrap()[1], b"one");
    }

    #[test]
    fn missing_rank_is_an_error_not_a_hang() {
        let addr = free_addr();
        let err = TcpRendezvous::new(0, 3, &addr, Duration::from_millis(200))
            .err()
            .unwrap();
        assert!(err.to_string().contains("[1, 2]"), "{err}");
    }

    /// Rank 0 of a job of `size` ranks at `addr`, in a thread: one allgather of `zero`.
    fn rank_0_says_zero(addr: &str, size: usize) -> std::thread::JoinHandle<Vec<Vec<u8>>> {
        let addr = addr.to_string();
        std::thread::spawn(move || {
            let mut b = TcpRendezvous::new(0, size, &addr, Duration::from_secs(10)).unwrap();
            b.allgather(b"zero").unwrap()
        })
    }

    /// A connection to `addr` once something listens there.
    fn connect_when_listening(addr: &str) -> TcpStream {
        loop {
            match TcpStream::connect(addr) {
                Ok(s) => return s,
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }

    fn free_addr() -> String {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        format!("127.0.0.1:{port}")
    }

    /// The tree's arithmetic agrees with itself: every rank is in its parent's subtree, the
    /// subtrees of a rank's children and itself make its subtree.
    #[test]
    fn the_tree_covers_every_rank_once() {
        for size in [1, 2, 8, 9, 10, 64, 73, 1000] {
            assert_eq!(subtree_size(0, size), size);
            for r in 0..size {
                let below: usize = children(r, size).map(|c| subtree_size(c, size)).sum();
                assert_eq!(subtree_size(r, size), below + 1, "{r} of {size}");
                assert!(children(r, size).len() <= FANOUT);
                if let Some(p) = parent(r) {
                    assert!(children(p, size).contains(&r));
                    assert!(in_subtree(r, p) && !in_subtree(p, r));
                    assert!(height(p, size) > height(r, size));
                }
            }
        }
    }

    /// 64 ranks as threads: three allgathers (blobs of every size class from 0 bytes) give
    /// every rank every blob in rank order, and no rank keeps more than FANOUT + 1 streams
    /// (rank 0: FANOUT), where a star kept 63 at rank 0.
    #[test]
    fn sixty_four_ranks_allgather_along_a_tree() {
        const P: usize = 64;
        let addr = free_addr();
        let blob =
            |r: usize, round: usize| crate::testing::pattern((r * 37 + round) % 300, r + round);
        let threads: Vec<_> = (0..P)
            .map(|r| {
                let addr = addr.clone();
                std::thread::spawn(move || {
                    let mut b = TcpRendezvous::new(r, P, &addr, Duration::from_secs(20)).unwrap();
                    let rounds: Vec<_> = (0..3)
                        .map(|round| b.allgather(&blob(r, round)).unwrap())
                        .collect();
                    (b.streams(), rounds)
                })
            })
            .collect();
        for (r, t) in threads.into_iter().enumerate() {
            let (streams, rounds) = t.join().unwrap();
            assert!(streams <= FANOUT + 1, "rank {r} keeps {streams} streams");
            if r == 0 {
                assert_eq!(streams, FANOUT);
            }
            for (round, all) in rounds.iter().enumerate() {
                let want: Vec<Vec<u8>> = (0..P).map(|q| blob(q, round)).collect();
                assert!(*all == want, "rank {r} round {round}");
            }
        }
    }

    /// A rank that is gone after the rendezvous (its streams closed, as when its process is
    /// killed) makes every other rank's allgather fail naming it: an inner rank (1, parent of
    /// 9..17), a leaf (20); with two gone in different subtrees, every rank names the same one.
    #[test]
    fn a_lost_rank_is_named_at_every_other_rank() {
        const P: usize = 24;
        for gone in [&[1][..], &[20], &[10, 20]] {
            let addr = free_addr();
            let threads: Vec<_> = (0..P)
                .map(|r| {
                    let addr = addr.clone();
                    let gone = gone.to_vec();
                    std::thread::spawn(move || {
                        let mut b =
                            TcpRendezvous::new(r, P, &addr, Duration::from_secs(20)).unwrap();
                        if gone.contains(&r) {
                            return None;
                        }
                        Some(b.allgather(b"x").unwrap_err().to_string())
                    })
                })
                .collect();
            let named: Vec<String> = threads
                .into_iter()
                .filter_map(|t| t.join().unwrap())
                .map(|e| {
                    let named = gone
                        .iter()
                        .find(|g| e.contains(&format!("allgather: lost rank {g} (")));
                    assert!(named.is_some(), "{gone:?}: {e}");
                    e.split(" (").next().unwrap().to_string()
                })
                .collect();
            assert!(named.iter().all(|n| *n == named[0]), "{gone:?}: {named:?}");
        }
    }

    /// A listener that says nothing in a rank's place does not stall the tree: rank 0 drops
    /// it after the hello wait, and the job goes on.
    #[test]
    fn silent_strays_at_rank_0_are_dropped() {
        let addr = free_addr();
        let rank0 = rank_0_says_zero(&addr, 3);
        let _silent = connect_when_listening(&addr);
        let others: Vec<_> = (1..3)
            .map(|r| {
                let addr = addr.clone();
                std::thread::spawn(move || {
                    let mut b = TcpRendezvous::new(r, 3, &addr, Duration::from_secs(10)).unwrap();
                    b.allgather(&[r as u8]).unwrap()
                })
            })
            .collect();
        for t in others {
            assert_eq!(t.join().unwrap()[0], b"zero");
        }
        assert_eq!(rank0.join().unwrap()[2], [2]);
    }
}
