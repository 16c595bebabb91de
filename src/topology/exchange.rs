//! A minimal TCP rendezvous allgather for the standalone tool: every rank sends one blob to
//! rank 0 (which listens on `PIPECAST_RENDEZVOUS`), rank 0 answers everyone with all blobs in
//! rank order. Used by `pipecast topo discover` to share LLDP observations; the engine's
//! bootstrap has a general one (DESIGN.md "Runtime shape").
//!
//! Framing: `PCX1`, rank (u32 BE), length (u32 BE), bytes; the answer is the count (u32 BE)
//! and then length + bytes per rank.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

const MAGIC: &[u8; 4] = b"PCX1";
/// Largest blob a rank may send.
pub const MAX_BLOB: usize = 1 << 20;

/// Where and who: this rank, the job size, and rank 0's listening address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendezvous {
    pub rank: usize,
    pub size: usize,
    pub addr: SocketAddr,
}

/// What went wrong in the exchange.
#[derive(Debug, thiserror::Error, PartialEq, Eq, Clone)]
pub enum ExchangeError {
    #[error("{var}={value:?} is not valid: {hint}")]
    Env {
        var: &'static str,
        value: String,
        hint: &'static str,
    },
    #[error("PIPECAST_RANK is set but {0} is not: set PIPECAST_RANK, PIPECAST_SIZE and PIPECAST_RENDEZVOUS together (`pipecast lab run` does)")]
    MissingEnv(&'static str),
    #[error("rendezvous with rank 0 at {addr} timed out after {seconds} s ({detail}): are all {size} ranks running?")]
    Timeout {
        addr: SocketAddr,
        seconds: u64,
        size: usize,
        detail: String,
    },
    #[error("rendezvous at {addr}: {reason}")]
    Protocol { addr: SocketAddr, reason: String },
    #[error("rendezvous at {addr}: {reason}")]
    Io { addr: SocketAddr, reason: String },
}

impl Rendezvous {
    /// Reads `PIPECAST_RANK`, `PIPECAST_SIZE`, `PIPECAST_RENDEZVOUS` (host:port). `None` when
    /// `PIPECAST_RANK` is unset (a single process, not a job).
    pub fn from_env() -> Result<Option<Rendezvous>, ExchangeError> {
        let Ok(rank) = std::env::var("PIPECAST_RANK") else {
            return Ok(None);
        };
        let size = std::env::var("PIPECAST_SIZE")
            .map_err(|_| ExchangeError::MissingEnv("PIPECAST_SIZE"))?;
        let addr = std::env::var("PIPECAST_RENDEZVOUS")
            .map_err(|_| ExchangeError::MissingEnv("PIPECAST_RENDEZVOUS"))?;
        Rendezvous::parse(&rank, &size, &addr).map(Some)
    }

    pub fn parse(rank: &str, size: &str, addr: &str) -> Result<Rendezvous, ExchangeError> {
        let size_n: usize =
            size.trim()
                .parse()
                .ok()
                .filter(|&s| s >= 1)
                .ok_or(ExchangeError::Env {
                    var: "PIPECAST_SIZE",
                    value: size.into(),
                    hint: "a positive number of ranks",
                })?;
        let rank_n: usize =
            rank.trim()
                .parse()
                .ok()
                .filter(|&r| r < size_n)
                .ok_or(ExchangeError::Env {
                    var: "PIPECAST_RANK",
                    value: rank.into(),
                    hint: "a rank from 0 to PIPECAST_SIZE-1",
                })?;
        let sock = addr
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .ok_or(ExchangeError::Env {
                var: "PIPECAST_RENDEZVOUS",
                value: addr.into(),
                hint: "HOST:PORT of rank 0, e.g. 198.18.0.1:47800",
            })?;
        Ok(Rendezvous {
            rank: rank_n,
            size: size_n,
            addr: sock,
        })
    }

    /// Sends `blob`, returns every rank's blob in rank order (this rank's included).
    pub fn allgather(&self, blob: &[u8], timeout: Duration) -> Result<Vec<Vec<u8>>, ExchangeError> {
        if blob.len() > MAX_BLOB {
            return Err(self.protocol(format!("blob of {} bytes exceeds {MAX_BLOB}", blob.len())));
        }
        if self.size == 1 {
            return Ok(vec![blob.to_vec()]);
        }
        let deadline = Instant::now() + timeout;
        if self.rank == 0 {
            self.gather_at_root(blob, deadline, timeout)
        } else {
            self.send_to_root(blob, deadline, timeout)
        }
    }

    fn protocol(&self, reason: String) -> ExchangeError {
        ExchangeError::Protocol {
            addr: self.addr,
            reason,
        }
    }
    fn io(&self, e: std::io::Error) -> ExchangeError {
        ExchangeError::Io {
            addr: self.addr,
            reason: e.to_string(),
        }
    }
    fn timeout(&self, timeout: Duration, detail: String) -> ExchangeError {
        ExchangeError::Timeout {
            addr: self.addr,
            seconds: timeout.as_secs(),
            size: self.size,
            detail,
        }
    }

    fn gather_at_root(
        &self,
        blob: &[u8],
        deadline: Instant,
        timeout: Duration,
    ) -> Result<Vec<Vec<u8>>, ExchangeError> {
        let listener = TcpListener::bind(self.addr).map_err(|e| self.io(e))?;
        listener.set_nonblocking(true).map_err(|e| self.io(e))?;
        let mut blobs: Vec<Option<Vec<u8>>> = vec![None; self.size];
        blobs[0] = Some(blob.to_vec());
        let mut peers = Vec::new();
        while peers.len() + 1 < self.size {
            match listener.accept() {
                Ok((mut stream, _)) => {
                    stream.set_nonblocking(false).map_err(|e| self.io(e))?;
                    let left = deadline.saturating_duration_since(Instant::now());
                    stream
                        .set_read_timeout(Some(left.max(Duration::from_millis(10))))
                        .map_err(|e| self.io(e))?;
                    let (rank, data) = self.read_hello(&mut stream)?;
                    if rank == 0 || rank >= self.size || blobs[rank].is_some() {
                        return Err(
                            self.protocol(format!("rank {rank} is out of range or came twice"))
                        );
                    }
                    blobs[rank] = Some(data);
                    peers.push(stream);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        let missing: Vec<String> = (0..self.size)
                            .filter(|&r| blobs[r].is_none())
                            .map(|r| r.to_string())
                            .collect();
                        return Err(self
                            .timeout(timeout, format!("ranks {} never came", missing.join(", "))));
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(self.io(e)),
            }
        }
        let all: Vec<Vec<u8>> = blobs
            .into_iter()
            .map(|b| b.expect("every rank arrived"))
            .collect();
        let mut answer = (all.len() as u32).to_be_bytes().to_vec();
        for b in &all {
            answer.extend((b.len() as u32).to_be_bytes());
            answer.extend(b);
        }
        for mut p in peers {
            p.write_all(&answer).map_err(|e| self.io(e))?;
        }
        Ok(all)
    }

    fn read_hello(&self, stream: &mut TcpStream) -> Result<(usize, Vec<u8>), ExchangeError> {
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).map_err(|e| self.io(e))?;
        if &head[..4] != MAGIC {
            return Err(
                self.protocol("a peer did not speak the pipecast rendezvous protocol".into())
            );
        }
        let rank = u32::from_be_bytes([head[4], head[5], head[6], head[7]]) as usize;
        let len = u32::from_be_bytes([head[8], head[9], head[10], head[11]]) as usize;
        if len > MAX_BLOB {
            return Err(self.protocol(format!(
                "rank {rank} sent {len} bytes, more than {MAX_BLOB}"
            )));
        }
        let mut data = vec![0u8; len];
        stream.read_exact(&mut data).map_err(|e| self.io(e))?;
        Ok((rank, data))
    }

    fn send_to_root(
        &self,
        blob: &[u8],
        deadline: Instant,
        timeout: Duration,
    ) -> Result<Vec<Vec<u8>>, ExchangeError> {
        // Rank 0 may not listen yet: retry until the deadline.
        let mut stream = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.timeout(timeout, "rank 0 never accepted".into()));
            }
            match TcpStream::connect_timeout(&self.addr, left.min(Duration::from_secs(1))) {
                Ok(s) => break s,
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        let left = deadline.saturating_duration_since(Instant::now());
        stream
            .set_read_timeout(Some(left.max(Duration::from_millis(10))))
            .map_err(|e| self.io(e))?;
        let mut hello = MAGIC.to_vec();
        hello.extend((self.rank as u32).to_be_bytes());
        hello.extend((blob.len() as u32).to_be_bytes());
        hello.extend(blob);
        stream.write_all(&hello).map_err(|e| self.io(e))?;
        let mut word = [0u8; 4];
        let mut read_u32 = |s: &mut TcpStream| -> Result<usize, ExchangeError> {
            s.read_exact(&mut word).map_err(|e| {
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) {
                    self.timeout(
                        timeout,
                        "rank 0 never answered (other ranks missing?)".into(),
                    )
                } else {
                    self.io(e)
                }
            })?;
            Ok(u32::from_be_bytes(word) as usize)
        };
        let count = read_u32(&mut stream)?;
        if count != self.size {
            return Err(self.protocol(format!("rank 0 sent {count} blobs for {} ranks", self.size)));
        }
        let mut all = Vec::with_capacity(count);
        for _ in 0..count {
            let len = read_u32(&mut stream)?;
            if len > MAX_BLOB {
                return Err(self.protocol(format!("rank 0 sent a blob of {len} bytes")));
            }
            let mut data = vec![0u8; len];
            stream.read_exact(&mut data).map_err(|e| self.io(e))?;
            all.push(data);
        }
        Ok(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_ranks_on_loopback_gather_in_rank_order() {
        // Port 0 cannot be shared, so pick a free one first.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let handles: Vec<_> = (0..4)
            .rev()
            .map(|rank| {
                let addr = addr.clone();
                std::thread::spawn(move || {
                    let rv = Rendezvous::parse(&rank.to_string(), "4", &addr).unwrap();
                    rv.allgather(format!("blob {rank}").as_bytes(), Duration::from_secs(10))
                })
            })
            .collect();
        for h in handles {
            let all = h.join().unwrap().unwrap();
            let text: Vec<String> = all
                .iter()
                .map(|b| String::from_utf8_lossy(b).into())
                .collect();
            assert_eq!(text, ["blob 0", "blob 1", "blob 2", "blob 3"]);
        }
    }

    #[test]
    fn a_missing_rank_times_out_with_a_clear_error() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let rv = Rendezvous::parse("0", "2", &format!("127.0.0.1:{port}")).unwrap();
        let e = rv.allgather(b"x", Duration::from_millis(200)).unwrap_err();
        assert!(e.to_string().contains("ranks 1 never came"), "{e}");
    }

    #[test]
    fn bad_environment_is_named() {
        assert!(Rendezvous::parse("4", "4", "127.0.0.1:1")
            .unwrap_err()
            .to_string()
            .contains("PIPECAST_RANK"));
        assert!(Rendezvous::parse("0", "x", "127.0.0.1:1")
            .unwrap_err()
            .to_string()
            .contains("PIPECAST_SIZE"));
        assert!(Rendezvous::parse("0", "1", "nowhere")
            .unwrap_err()
            .to_string()
            .contains("PIPECAST_RENDEZVOUS"));
    }
}
