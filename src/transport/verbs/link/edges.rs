//! The verbs link's edges: one reliable-connected queue pair per tree edge, created when a
//! broadcast in flight first uses the edge (its parent or a child at this rank) and kept in a
//! cache keyed by peer, so that broadcasts whose roots or trees change reuse what earlier
//! ones connected; above [`LinkConfig::max_qps`](super::LinkConfig::max_qps) idle edges are
//! closed, least recently used first, with the peer's agreement.
//!
//! The connection information travels on the side channel of `../handshake.rs` (request,
//! reply, ready; crossing requests: the lower rank's wins). Every wait has a deadline and
//! every connection's end is noticed, so a peer that is gone or never answers fails the
//! broadcasts that need it with its reason: never a hang.

use super::super::handshake::{Conn, Got, Hello, Kind};
use super::super::ops::{Remote, Verbs, VerbsError};
use super::{bump, io, Peer, Region, VerbsLink, SLOT};
use crate::transport::TransportError;
use std::collections::{BTreeSet, VecDeque};
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

/// After a peer refused to close an idle edge (it uses it), this rank asks again no sooner.
const CLOSE_BACKOFF: Duration = Duration::from_millis(500);

/// Registered ring and receive blocks kept for the next edge (one is made at creation, so
/// that a locked-memory limit too low for even one edge fails the link's opening, where
/// `auto` can still take another transport).
pub(super) const SPARE: usize = 2;

/// The registered regions of one edge: its ring block (where the peer writes pieces when
/// this rank's buffer is not registered) and its control receive slots.
pub(super) fn edge_regions<V: Verbs>(
    verbs: &mut V,
    cfg: &super::LinkConfig,
) -> Result<(Region, Region), VerbsError> {
    let ring = Region::new(verbs, cfg.ring_slots as usize * cfg.ring_slot as usize)?;
    match Region::new(verbs, cfg.recv_depth as usize * SLOT) {
        Ok(recv) => Ok((ring, recv)),
        Err(e) => {
            verbs.deregister(ring.mr.id);
            Err(e)
        }
    }
}

/// Where an edge's handshake is.
pub(crate) enum Edge {
    /// This rank asked (its queue pair in INIT): waiting for the reply.
    Asking { conn: Conn, deadline: Instant },
    /// Its request crossed the peer's, which wins (the peer's rank is lower): waiting for
    /// that request, to answer it with this queue pair (still in INIT).
    Yielded { deadline: Instant },
    /// This rank answered the peer's request (its queue pair in RTS): waiting for "ready"
    /// before sending on it.
    Answered { conn: Conn, deadline: Instant },
    /// Connected both ways: traffic flows.
    Ready,
    /// Idle and over the bound: this rank asked the peer to close it.
    Closing { conn: Conn, deadline: Instant },
}

impl<V: Verbs> VerbsLink<V> {
    /// One round of the edges: asks for those the broadcasts in flight (`busy`) need and this
    /// rank lacks, takes what the side channel brought, enforces deadlines, and closes idle
    /// edges over the bound.
    pub(super) fn edges(&mut self, busy: &BTreeSet<usize>) -> Result<(), TransportError> {
        let at = Instant::now();
        for &peer in busy {
            if !self.peers.contains_key(&peer) && !self.failed.contains_key(&peer) {
                self.ask(peer, at)?;
            }
        }
        loop {
            match self.listener.accept() {
                Ok(Some(c)) => self.incoming.push((c, at + self.connect_timeout)),
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "verbs: accepting a handshake connection");
                    break;
                }
            }
        }
        for (mut conn, deadline) in std::mem::take(&mut self.incoming) {
            match conn.recv() {
                Got::Frame(h) => self.first_frame(conn, h, busy, at)?,
                Got::Nothing if at < deadline => self.incoming.push((conn, deadline)),
                Got::Nothing => tracing::debug!("verbs: a handshake connection said nothing"),
                Got::Closed(e) => tracing::debug!(error = %e, "verbs: a handshake connection"),
            }
        }
        self.leaving
            .retain_mut(|c| c.flush().is_ok() && !c.flushed());
        let peers: Vec<usize> = self.peers.keys().copied().collect();
        for peer in peers {
            self.step(peer, at)?;
        }
        self.close_idle(busy, at);
        Ok(())
    }

    /// The side channel's descriptors and what to wait for on each: a frame arriving, or a
    /// connection under way getting established (its queued frame then goes out); and
    /// each one's identity (the listener's is 0).
    pub(super) fn side_fds(&self) -> Vec<(RawFd, i16, u64)> {
        let mut fds = vec![(self.listener.fd(), libc::POLLIN, 0)];
        fds.extend(
            self.incoming
                .iter()
                .map(|(c, _)| (c.fd(), libc::POLLIN, c.id())),
        );
        let mut conn_fd = |c: &Conn| {
            let events = if c.connected() {
                libc::POLLIN
            } else {
                libc::POLLOUT
            };
            fds.push((c.fd(), events, c.id()));
        };
        for p in self.peers.values() {
            match &p.edge {
                Edge::Asking { conn, .. }
                | Edge::Answered { conn, .. }
                | Edge::Closing { conn, .. } => conn_fd(conn),
                Edge::Yielded { .. } | Edge::Ready => {}
            }
        }
        fds
    }

    /// Destroys `peer`'s queue pair (first, so the device writes into its rings no more)
    /// and keeps its rings for the next edge (up to [`SPARE`] of them) or deregisters them.
    pub(super) fn drop_peer(&mut self, peer: usize) {
        if let Some(p) = self.peers.remove(&peer) {
            self.verbs.destroy_qp(p.qp);
            self.retiring += 1;
            self.by_qp.remove(&p.qp);
            if self.spare.len() < SPARE {
                self.spare.push((p.ring, p.recv));
            } else {
                self.verbs.deregister(p.ring.mr.id);
                self.verbs.deregister(p.recv.mr.id);
            }
        }
    }

    /// The edge to `peer` failed: it is dropped, and broadcasts that need the peer fail with
    /// `why` (`progress`).
    fn fail(&mut self, peer: usize, why: String) {
        tracing::debug!(peer, why, "verbs: edge failed");
        self.drop_peer(peer);
        self.failed.entry(peer).or_insert(why);
    }

    /// A queue pair to `peer` in INIT, its receive slots posted, and its rings.
    fn new_peer(&mut self, peer: usize, edge: Edge) -> Result<(), TransportError> {
        let v = |e: VerbsError| io(peer, format!("a queue pair for rank {peer}: {e}"));
        self.cq_room(peer)?;
        let qp = self.verbs.create_qp().map_err(v)?;
        let made = self
            .verbs
            .to_init(qp)
            .and_then(|()| match self.spare.pop() {
                Some(r) => Ok(r),
                None => edge_regions(&mut self.verbs, &self.cfg),
            });
        let (ring, recv) = match made {
            Ok(r) => r,
            Err(e) => {
                self.verbs.destroy_qp(qp);
                let hint = match e {
                    VerbsError::Register { .. } => {
                        " (raise the locked-memory limit, `ulimit -l`, or use PIPECAST_TRANSPORT=tcp)"
                    }
                    _ => "",
                };
                return Err(io(peer, format!("a queue pair for rank {peer}: {e}{hint}")));
            }
        };
        self.by_qp.insert(qp, peer);
        self.peers.insert(
            peer,
            Peer {
                qp,
                edge,
                remote_qpn: 0,
                ring,
                recv,
                ring_addr: 0,
                ring_rkey: 0,
                sq_used: 0,
                free_recvs: (0..self.cfg.recv_depth).rev().collect(),
                control_out: VecDeque::new(),
                data_out: VecDeque::new(),
                ring_sent: 0,
                ring_released: 0,
                ring_arrived: 0,
                ring_release_sent: 0,
                assembling: None,
                heartbeat_out: false,
                last_sent: 0,
                last_used: 0,
                close_after: None,
            },
        );
        bump(&mut self.counters, "verbs_qps_created", 1);
        // Receives may be posted in INIT: the peer finds them when it first sends.
        self.post_recvs(peer, self.cfg.control_recvs)
    }

    /// This rank's end of the edge to `peer`, as a frame of `kind`.
    fn hello(&self, kind: Kind, peer: usize) -> Hello {
        let p = &self.peers[&peer];
        Hello {
            qpn: self.verbs.qp_num(p.qp),
            port: self.verbs.port(),
            ring_addr: p.ring.addr(0),
            ring_rkey: p.ring.mr.rkey,
            ring_slot: self.cfg.ring_slot,
            ring_slots: self.cfg.ring_slots,
            ..Hello::bare(kind, self.cookie, self.rank, peer)
        }
    }

    /// Starts a side-channel connection to `peer`'s listener. It does not wait for the
    /// connection: the kernel of a live host answers at once, but a host that is down never
    /// does, and the other edges must move meanwhile; the edge's deadline bounds the wait
    /// ([`unreachable`]).
    fn dial(&self, peer: usize) -> Result<Conn, String> {
        let addr = self.listen[peer];
        Conn::open(addr).map_err(|e| {
            format!(
                "cannot reach its queue pair handshake listener {addr}: {e} (is it still running?)"
            )
        })
    }

    /// Asks `peer` for the edge: a queue pair in INIT, and a request.
    fn ask(&mut self, peer: usize, at: Instant) -> Result<(), TransportError> {
        let mut conn = match self.dial(peer) {
            Ok(c) => c,
            Err(why) => {
                self.fail(peer, why);
                return Ok(());
            }
        };
        let deadline = at + self.connect_timeout;
        self.new_peer(peer, Edge::Yielded { deadline })?;
        match conn.send(&self.hello(Kind::Request, peer)) {
            Ok(()) => self.set_edge(peer, Edge::Asking { conn, deadline }),
            Err(e) => self.fail(peer, format!("sending it a queue pair request: {e}")),
        }
        Ok(())
    }

    fn set_edge(&mut self, peer: usize, edge: Edge) {
        if let Some(p) = self.peers.get_mut(&peer) {
            p.edge = edge;
        }
    }

    /// Connects `peer`'s queue pair (in INIT) to the far end `h` describes: RTR, RTS.
    fn join(&mut self, peer: usize, h: &Hello) -> Result<(), String> {
        if h.ring_slots != self.cfg.ring_slots || h.ring_slot != self.cfg.ring_slot {
            return Err(format!(
                "it has rings of {} × {} bytes, this rank {} × {}: run the same pipecast everywhere",
                h.ring_slots, h.ring_slot, self.cfg.ring_slots, self.cfg.ring_slot
            ));
        }
        let p = self.peers.get_mut(&peer).expect("a queue pair to join");
        let remote = Remote {
            qpn: h.qpn,
            port: h.port,
        };
        let to = |e: VerbsError| format!("connecting the queue pair: {e}");
        self.verbs.to_rtr(p.qp, &remote).map_err(to)?;
        self.verbs.to_rts(p.qp).map_err(to)?;
        p.remote_qpn = h.qpn;
        p.ring_addr = h.ring_addr;
        p.ring_rkey = h.ring_rkey;
        Ok(())
    }

    /// Answers `peer`'s request `h` on `conn` with this rank's queue pair (made now, or the
    /// one in INIT from its own crossing request), in RTS.
    fn answer(
        &mut self,
        peer: usize,
        mut conn: Conn,
        h: &Hello,
        at: Instant,
    ) -> Result<(), TransportError> {
        let deadline = at + self.connect_timeout;
        if !self.peers.contains_key(&peer) {
            self.new_peer(peer, Edge::Yielded { deadline })?;
        }
        if let Err(why) = self.join(peer, h) {
            self.fail(peer, why);
            return Ok(());
        }
        match conn.send(&self.hello(Kind::Reply, peer)) {
            Ok(()) => self.set_edge(peer, Edge::Answered { conn, deadline }),
            Err(e) => self.fail(peer, format!("replying to its queue pair request: {e}")),
        }
        Ok(())
    }

    /// Whether `h` is from `peer`, of this job, for this rank.
    fn ours(&self, h: &Hello) -> bool {
        h.cookie == self.cookie
            && h.to as usize == self.rank
            && (h.from as usize) < self.size
            && h.from as usize != self.rank
    }

    /// The first frame of a connection a peer opened: a request or a close.
    fn first_frame(
        &mut self,
        mut conn: Conn,
        h: Hello,
        busy: &BTreeSet<usize>,
        at: Instant,
    ) -> Result<(), TransportError> {
        if !self.ours(&h) {
            tracing::debug!(?h, "verbs: a handshake not for this rank of this job");
            return Ok(());
        }
        let peer = h.from as usize;
        if self.failed.contains_key(&peer) {
            return Ok(()); // dropped: it sees the connection close
        }
        match h.kind {
            Kind::Request => match self.peers.get(&peer).map(|p| &p.edge) {
                None | Some(Edge::Yielded { .. }) => self.answer(peer, conn, &h, at)?,
                // Crossing requests: the lower rank's wins.
                Some(Edge::Asking { .. }) if peer < self.rank => self.answer(peer, conn, &h, at)?,
                Some(Edge::Asking { .. }) => {
                    let y = Hello::bare(Kind::Yield, self.cookie, self.rank, peer);
                    if conn.send(&y).is_ok() {
                        self.leaving.push(conn);
                    }
                }
                // It asks only once it has no queue pair: it closed its end.
                Some(Edge::Closing { .. }) => {
                    self.drop_peer(peer);
                    self.answer(peer, conn, &h, at)?;
                }
                Some(Edge::Answered { .. } | Edge::Ready) => self.fail(
                    peer,
                    "it asked for a second queue pair while this rank's is connected".into(),
                ),
            },
            Kind::Close => {
                let agree = match self.peers.get(&peer) {
                    None => true,
                    // Both want it gone.
                    Some(Peer {
                        edge: Edge::Closing { .. },
                        ..
                    }) => true,
                    Some(p) => {
                        matches!(p.edge, Edge::Ready)
                            && p.remote_qpn == h.qpn
                            && !busy.contains(&peer)
                            && self.idle(peer)
                    }
                };
                let kind = if agree {
                    self.drop_peer(peer);
                    bump(&mut self.counters, "verbs_qps_closed", 1);
                    Kind::Closed
                } else {
                    Kind::Busy
                };
                if conn
                    .send(&Hello::bare(kind, self.cookie, self.rank, peer))
                    .is_ok()
                {
                    self.leaving.push(conn);
                }
            }
            k => tracing::debug!(peer, ?k, "verbs: a handshake connection began with {k:?}"),
        }
        Ok(())
    }

    /// Whether `h` came from `peer`, of this job, for this rank.
    fn from(&self, peer: usize, h: &Hello) -> bool {
        self.ours(h) && h.from as usize == peer
    }

    /// Advances the handshake of the edge to `peer`.
    fn step(&mut self, peer: usize, at: Instant) -> Result<(), TransportError> {
        let Some(p) = self.peers.get_mut(&peer) else {
            return Ok(());
        };
        let timeout = self.connect_timeout;
        match std::mem::replace(&mut p.edge, Edge::Ready) {
            Edge::Ready => {}
            Edge::Yielded { deadline } if at < deadline => {
                self.set_edge(peer, Edge::Yielded { deadline })
            }
            Edge::Yielded { .. } => self.fail(
                peer,
                format!("its queue pair request, which won over this rank's, did not come within {timeout:?}"),
            ),
            Edge::Asking { mut conn, deadline } => match conn.recv() {
                Got::Frame(h) if self.from(peer, &h) && h.kind == Kind::Reply => {
                    if let Err(why) = self.join(peer, &h) {
                        self.fail(peer, why);
                        return Ok(());
                    }
                    // Ready (the edge is already): the peer may send from now on.
                    let ready = Hello::bare(Kind::Ready, self.cookie, self.rank, peer);
                    match conn.send(&ready) {
                        Ok(()) => self.leaving.push(conn),
                        Err(e) => self.fail(peer, format!("telling it the queue pair is ready: {e}")),
                    }
                }
                Got::Frame(h) if self.from(peer, &h) && h.kind == Kind::Yield => {
                    self.set_edge(peer, Edge::Yielded { deadline })
                }
                Got::Frame(h) => self.fail(
                    peer,
                    format!("it answered a queue pair request with {:?}", h.kind),
                ),
                Got::Nothing if at < deadline => self.set_edge(peer, Edge::Asking { conn, deadline }),
                Got::Nothing if !conn.connected() => self.fail(peer, unreachable(&conn, timeout)),
                Got::Nothing => self.fail(
                    peer,
                    format!("it did not answer a queue pair request within {timeout:?}"),
                ),
                Got::Closed(e) if !conn.connected() => self.fail(peer, e),
                Got::Closed(e) => self.fail(
                    peer,
                    format!("it closed the queue pair handshake before replying ({e}): is it still running?"),
                ),
            },
            Edge::Answered { mut conn, deadline } => match conn.recv() {
                Got::Frame(h) if self.from(peer, &h) && h.kind == Kind::Ready => {} // Ready
                Got::Frame(h) => self.fail(
                    peer,
                    format!("it answered a queue pair reply with {:?}", h.kind),
                ),
                Got::Nothing if at < deadline => {
                    self.set_edge(peer, Edge::Answered { conn, deadline })
                }
                Got::Nothing => self.fail(
                    peer,
                    format!("it did not confirm the queue pair within {timeout:?}"),
                ),
                Got::Closed(e) => self.fail(
                    peer,
                    format!("it closed the queue pair handshake before confirming ({e}): is it still running?"),
                ),
            },
            Edge::Closing { mut conn, deadline } => match conn.recv() {
                Got::Frame(h) if self.from(peer, &h) && h.kind == Kind::Closed => {
                    self.drop_peer(peer);
                    bump(&mut self.counters, "verbs_qps_closed", 1);
                }
                Got::Frame(h) if self.from(peer, &h) && h.kind == Kind::Busy => {
                    if let Some(p) = self.peers.get_mut(&peer) {
                        p.close_after = Some(at + CLOSE_BACKOFF); // Ready again
                    }
                }
                Got::Nothing if at < deadline => {
                    self.set_edge(peer, Edge::Closing { conn, deadline })
                }
                Got::Nothing if !conn.connected() => self.fail(peer, unreachable(&conn, timeout)),
                Got::Frame(_) | Got::Nothing => {
                    self.fail(peer, "it did not answer closing the idle queue pair".into())
                }
                Got::Closed(e) if !conn.connected() => self.fail(peer, e),
                Got::Closed(e) => self.fail(
                    peer,
                    format!("it closed the connection while closing the idle queue pair ({e}): is it still running?"),
                ),
            },
        }
        Ok(())
    }

    /// Whether nothing of the edge to `peer` is in flight or queued at this rank.
    fn idle(&self, peer: usize) -> bool {
        self.peers.get(&peer).is_some_and(|p| {
            p.sq_used == 0
                && p.control_out.is_empty()
                && p.data_out.is_empty()
                && p.assembling.is_none()
                && p.ring_sent == p.ring_released
                && p.ring_arrived == p.ring_release_sent
        }) && !self.adverts.keys().any(|&(q, _)| q == peer)
            && !self.gone.contains_key(&peer)
    }

    /// Above the bound, asks the peers of the least recently used idle edges to close them.
    fn close_idle(&mut self, busy: &BTreeSet<usize>, at: Instant) {
        let closing = self
            .peers
            .values()
            .filter(|p| matches!(p.edge, Edge::Closing { .. }))
            .count();
        let over = (self.peers.len() - closing).saturating_sub(self.cfg.max_qps);
        if over == 0 {
            return;
        }
        let mut idle: Vec<(u64, usize)> = self
            .peers
            .iter()
            .filter(|&(r, p)| {
                matches!(p.edge, Edge::Ready)
                    && p.close_after.is_none_or(|t| at >= t)
                    && !busy.contains(r)
                    && self.idle(*r)
            })
            .map(|(&r, p)| (p.last_used, r))
            .collect();
        idle.sort_unstable();
        for (_, peer) in idle.into_iter().take(over) {
            let mut conn = match self.dial(peer) {
                Ok(c) => c,
                Err(why) => {
                    self.fail(peer, why);
                    continue;
                }
            };
            let close = Hello {
                qpn: self.verbs.qp_num(self.peers[&peer].qp),
                ..Hello::bare(Kind::Close, self.cookie, self.rank, peer)
            };
            let deadline = at + self.connect_timeout;
            match conn.send(&close) {
                Ok(()) => self.set_edge(peer, Edge::Closing { conn, deadline }),
                Err(e) => self.fail(peer, format!("asking it to close an idle queue pair: {e}")),
            }
        }
    }
}

/// Why an edge failed whose side-channel connection was never established by its deadline:
/// the peer's host does not answer (down, or cut off).
fn unreachable(conn: &Conn, timeout: Duration) -> String {
    format!(
        "cannot reach its queue pair handshake listener{} within {timeout:?}: is its host up?",
        conn.peer().map(|a| format!(" {a}")).unwrap_or_default()
    )
}
