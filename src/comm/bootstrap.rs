//! Bootstrap: the one collective pipecast needs from its host, an allgather of small blobs.

use super::CommError;
use std::io::{Read, Write};
use std::net::{IpAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Allgather of small address blobs. Open MPI implements it with `MPI_Allgather` through a
/// C callback; the standalone tool with [`TcpRendezvous`].
pub trait Bootstrap: Send {
    /// Every rank calls this with its blob; returns all blobs in rank order.
    fn allgather(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, CommError>;
}

/// Largest blob accepted, so a foreign peer cannot make us allocate gigabytes.
const MAX_BLOB: u32 = 1 << 20;
use crate::wire::hello;
/// How long rank 0 waits for the hello of a fresh connection.
const HELLO_WAIT: Duration = Duration::from_secs(2);

/// A TCP rendezvous: rank 0 listens at a known address, the others connect to it; each
/// allgather sends blobs to rank 0, which sends the full list back.
pub struct TcpRendezvous {
    rank: usize,
    size: usize,
    /// Rank 0: streams to ranks 1.. (index r-1); others: the stream to rank 0.
    streams: Vec<TcpStream>,
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
        if size == 0 || rank >= size {
            return Err(CommError::BadRank { rank, size });
        }
        let bad = |e: std::io::Error| CommError::Bootstrap(format!("rendezvous {addr}: {e}"));
        let deadline = Instant::now() + timeout;
        let mut streams = Vec::new();
        let local_ip;
        if rank == 0 {
            let listener = TcpListener::bind(addr).map_err(bad)?;
            local_ip = listener.local_addr().ok().map(|a| a.ip());
            listener.set_nonblocking(true).map_err(bad)?;
            let mut by_rank: Vec<Option<TcpStream>> = (1..size).map(|_| None).collect();
            while by_rank.iter().any(Option::is_none) {
                match listener.accept() {
                    Ok((mut s, from)) => {
                        s.set_nonblocking(false).map_err(bad)?;
                        // A stray that connects and says nothing must not stall the job.
                        s.set_read_timeout(Some(HELLO_WAIT.min(timeout)))
                            .map_err(bad)?;
                        // A rank's first bytes to rank 0: its rank and the job size.
                        let mut first = [0u8; hello::LEN];
                        let words = s
                            .read_exact(&mut first)
                            .ok()
                            .and_then(|()| hello::parse(hello::RENDEZVOUS, &first));
                        let Some((r, n)) = words else {
                            tracing::warn!(%from, "rendezvous: dropped a connection that is not a pipecast rank's");
                            continue;
                        };
                        s.set_read_timeout(Some(timeout)).map_err(bad)?;
                        let (r, n) = (r as usize, n as usize);
                        if n != size {
                            return Err(CommError::Bootstrap(format!(
                                "rank {r} says the job has {n} ranks, rank 0 says {size}: set the same PIPECAST_SIZE everywhere"
                            )));
                        }
                        match by_rank.get_mut(r.wrapping_sub(1)) {
                            Some(slot @ None) => *slot = Some(s),
                            _ => {
                                return Err(CommError::Bootstrap(format!(
                                    "rank {r} joined twice or is out of range 1..{size}: give every process its own PIPECAST_RANK"
                                )))
                            }
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        if Instant::now() >= deadline {
                            let missing: Vec<usize> =
                                (1..size).filter(|r| by_rank[r - 1].is_none()).collect();
                            return Err(CommError::Bootstrap(format!(
                                "ranks {missing:?} did not join the rendezvous at {addr} within {} ms",
                                timeout.as_millis()
                            )));
                        }
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    Err(e) => return Err(bad(e)),
                }
            }
            streams = by_rank
                .into_iter()
                .map(|s| s.expect("all joined"))
                .collect();
        } else {
            let target =
                addr.to_socket_addrs().map_err(bad)?.next().ok_or_else(|| {
                    CommError::Bootstrap(format!("rendezvous {addr}: no address"))
                })?;
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
            s.set_read_timeout(Some(timeout)).map_err(bad)?;
            s.write_all(&hello::emit(hello::RENDEZVOUS, rank as u64, size as u64))
                .map_err(bad)?;
            local_ip = s.local_addr().ok().map(|a| a.ip());
            streams.push(s);
        }
        for s in &streams {
            s.set_nodelay(true).map_err(bad)?;
        }
        Ok(TcpRendezvous {
            rank,
            size,
            streams,
            local_ip: local_ip.filter(|ip| !ip.is_unspecified()),
        })
    }

    /// This host's address on the way to the rendezvous: a good address to listen on.
    pub fn local_ip(&self) -> Option<IpAddr> {
        self.local_ip
    }

    /// Sets how long an allgather may wait for the slowest rank.
    pub fn set_timeout(&mut self, timeout: Duration) -> Result<(), CommError> {
        for s in &self.streams {
            s.set_read_timeout(Some(timeout))
                .map_err(|e| CommError::Bootstrap(e.to_string()))?;
        }
        Ok(())
    }
}

fn send_blob(s: &mut TcpStream, blob: &[u8]) -> std::io::Result<()> {
    s.write_all(&(blob.len() as u32).to_le_bytes())?;
    s.write_all(blob)
}

fn recv_blob(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len);
    if len > MAX_BLOB {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("blob of {len} bytes is larger than {MAX_BLOB}"),
        ));
    }
    let mut blob = vec![0; len as usize];
    s.read_exact(&mut blob)?;
    Ok(blob)
}

impl Bootstrap for TcpRendezvous {
    fn allgather(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, CommError> {
        let rank = self.rank;
        let lost = |peer: usize, e: std::io::Error| {
            CommError::Bootstrap(format!(
                "allgather: lost rank {peer} ({e}): it died or called a different collective"
            ))
        };
        if rank == 0 {
            let mut all = vec![mine.to_vec()];
            for (i, s) in self.streams.iter_mut().enumerate() {
                all.push(recv_blob(s).map_err(|e| lost(i + 1, e))?);
            }
            for (i, s) in self.streams.iter_mut().enumerate() {
                for blob in &all {
                    send_blob(s, blob).map_err(|e| lost(i + 1, e))?;
                }
            }
            Ok(all)
        } else {
            let s = &mut self.streams[0];
            send_blob(s, mine).map_err(|e| lost(0, e))?;
            (0..self.size)
                .map(|_| recv_blob(s).map_err(|e| lost(0, e)))
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendezvous_allgathers_in_rank_order() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
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
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let rank0 = {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let mut b = TcpRendezvous::new(0, 2, &addr, Duration::from_secs(10)).unwrap();
                b.allgather(b"zero").unwrap()
            })
        };
        let stray = loop {
            match TcpStream::connect(&addr) {
                Ok(s) => break s,
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        };
        (&stray).write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
        let mut b = TcpRendezvous::new(1, 2, &addr, Duration::from_secs(10)).unwrap();
        assert_eq!(b.allgather(b"one").unwrap()[0], b"zero");
        assert_eq!(rank0.join().unwrap()[1], b"one");
    }

    #[test]
    fn missing_rank_is_an_error_not_a_hang() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let err = TcpRendezvous::new(0, 3, &addr, Duration::from_millis(200))
            .err()
            .unwrap();
        assert!(err.to_string().contains("[1, 2]"), "{err}");
    }
}
