//! A MODEL of the verbs semantics the link relies on, in memory, for tests: these machines
//! have no RDMA device (and no kernel RDMA support, so no software device either), so the
//! link's protocol runs here against this model and the real backend (`sys/`) only builds.
//!
//! What it models, as the InfiniBand specification and rdma-core's man pages describe RC
//! queue pairs:
//! - states: RESET → INIT → RTR → RTS only in that order; posting a send outside RTS fails
//!   at once (in ERROR it is accepted and flushed); a failed work request moves its queue
//!   pair to ERROR, and everything still queued on it completes as flushed;
//! - completion order: a queue pair executes its send queue in order, and receives complete
//!   in arrival order;
//! - RDMA WRITE checks the peer's rkey and range (a bad one fails with a remote access error
//!   at the writer, and the peer's queue pair goes to ERROR too; a zero-length write checks
//!   nothing); WRITE with immediate and
//!   SEND consume the peer's next posted receive, and wait (RNR) while it has none, for ever
//!   with `rnr_retry` 7 or failing after that many retries otherwise;
//! - the completion queue holds a fixed number of completions (as created or resized; a
//!   resize below what it holds fails, as `ibv_resize_cq` does): one more is an overrun, fatal on a device (the queue and its queue pairs go to the error
//!   state); the model records it and every later poll fails, so a protocol that can
//!   overrun its queue is caught;
//! - the completion channel: after `arm` (`ibv_req_notify_cq`), the next completion makes
//!   its descriptor readable once (an eventfd here, a [`Wake`]), whichever thread's call delivered it;
//! - a peer whose process is gone (its [`ModelVerbs`] dropped, or [`Fabric::kill`]) makes
//!   every send to it fail with "retry exceeded"; nothing tells a receiver.
//!
//! Bytes really move: registered regions are this process's memory, and a delivered write
//! copies the source's bytes at execution time (not when posted) into the target region, so
//! a protocol that reuses a buffer too early, or deregisters it while a write is queued, is
//! caught. Delivery happens synchronously inside the model's calls (post, poll).

use super::ops::{
    Completion, Local, Mr, MrId, Op, PortAddr, QpId, QpState, RecvWr, Remote, SendWr, Verbs,
    VerbsError, WcKind, WcStatus,
};
use crate::transport::Wake;
use std::collections::{BTreeMap, VecDeque};
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};

/// The bytes of a send, as the device would fetch them.
#[derive(Debug, Clone)]
enum Source {
    Empty,
    Sge { addr: u64, len: u32, lkey: u32 },
    Inline(Vec<u8>),
}

#[derive(Debug, Clone)]
struct Pending {
    wr_id: u64,
    op: Op,
    source: Source,
}

#[derive(Debug)]
struct ModelQp {
    node: usize,
    local: QpId,
    state: QpState,
    remote: Option<Remote>,
    sq: VecDeque<Pending>,
    rq: VecDeque<RecvWr>,
    rnr_tries: u32,
    destroyed: bool,
}

#[derive(Debug, Clone, Copy)]
struct Region {
    addr: u64,
    len: u64,
    lkey: u32,
    rkey: u32,
}

#[derive(Debug, Default)]
struct Node {
    alive: bool,
    mrs: BTreeMap<u64, Region>,
    cq: VecDeque<Completion>,
    /// Completions the queue holds, and whether it overran.
    cq_entries: usize,
    cq_overrun: bool,
    /// The completion channel (an eventfd, kept as long as the fabric so that a late
    /// completion never writes to a reused descriptor), and whether it is armed.
    channel: Option<Arc<Wake>>,
    armed: bool,
    /// Bytes this node may still register (a locked-memory limit); `None`: no limit.
    budget: Option<u64>,
}

/// What the model saw happen.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    pub writes: u64,
    pub sends: u64,
    pub rnr_naks: u64,
    pub remote_access_errors: u64,
    pub retry_exceeded: u64,
    pub cq_overruns: u64,
}

#[derive(Debug)]
struct State {
    nodes: Vec<Node>,
    qps: Vec<ModelQp>,
    rnr_retry: u32,
    next_key: u32,
    stats: Stats,
}

const QPN_BASE: u32 = 0x100;

/// The model's fabric: every node and queue pair of a test.
#[derive(Clone)]
pub struct Fabric(Arc<Mutex<State>>);

impl Fabric {
    /// An empty fabric whose queue pairs retry RNR `rnr_retry` times (7: for ever, as the
    /// link configures real queue pairs).
    pub fn new(rnr_retry: u32) -> Fabric {
        Fabric(Arc::new(Mutex::new(State {
            nodes: Vec::new(),
            qps: Vec::new(),
            rnr_retry,
            next_key: 0x1000,
            stats: Stats::default(),
        })))
    }

    /// A new node (a process with a port) on the fabric, its completion queue of 65536
    /// entries.
    pub fn node(&self) -> ModelVerbs {
        self.node_with_cq(1 << 16)
    }

    /// A new node whose completion queue holds `entries` completions.
    pub fn node_with_cq(&self, entries: usize) -> ModelVerbs {
        let channel = Some(Arc::new(Wake::new().expect("an eventfd")));
        let mut s = self.lock();
        s.nodes.push(Node {
            alive: true,
            cq_entries: entries,
            channel,
            ..Node::default()
        });
        ModelVerbs {
            fabric: self.clone(),
            node: s.nodes.len() - 1,
            qps: Vec::new(),
        }
    }

    /// From now on `node` may register at most `bytes` more (0: every registration fails).
    pub fn limit_registration(&self, node: usize, bytes: u64) {
        self.lock().nodes[node].budget = Some(bytes);
    }

    /// The node's process dies: its queue pairs and regions are gone.
    pub fn kill(&self, node: usize) {
        let mut s = self.lock();
        kill(&mut s, node);
    }

    pub fn stats(&self) -> Stats {
        self.lock().stats
    }

    /// Queue pairs `node` ever created, and how many of them it destroyed.
    pub fn qps_of(&self, node: usize) -> (usize, usize) {
        let s = self.lock();
        let mine = s.qps.iter().filter(|q| q.node == node);
        let destroyed = mine.clone().filter(|q| q.destroyed).count();
        (mine.count(), destroyed)
    }

    /// How many completions `node`'s completion queue holds now.
    pub fn cq_entries_of(&self, node: usize) -> usize {
        self.lock().nodes[node].cq_entries
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn kill(s: &mut State, node: usize) {
    let n = &mut s.nodes[node];
    n.alive = false;
    n.mrs.clear();
    n.cq.clear();
    for q in s.qps.iter_mut().filter(|q| q.node == node) {
        q.state = QpState::Error;
        q.sq.clear();
        q.rq.clear();
    }
}

fn port_of(node: usize) -> PortAddr {
    let mut gid = [0u8; 16];
    gid[10] = 0xff;
    gid[11] = 0xff;
    gid[12..].copy_from_slice(&[10, 0, 0, node as u8 + 1]);
    PortAddr {
        port: 1,
        gid_index: 0,
        lid: node as u16 + 1,
        gid,
        mtu: 5,
    }
}

/// Moves queue pair `q` to ERROR: what is queued completes as flushed.
fn fail(s: &mut State, q: usize) {
    let qp = &mut s.qps[q];
    qp.state = QpState::Error;
    let (node, local) = (qp.node, qp.local);
    let sq: Vec<Pending> = qp.sq.drain(..).collect();
    let rq: Vec<RecvWr> = qp.rq.drain(..).collect();
    for p in sq {
        let c = done(p.wr_id, local, WcStatus::Flushed, WcKind::Send, 0, None);
        complete(s, node, c);
    }
    for r in rq {
        let c = done(r.wr_id, local, WcStatus::Flushed, WcKind::Recv, 0, None);
        complete(s, node, c);
    }
}

/// Puts a completion on `node`'s queue, unless it is full: then the queue overran.
fn complete(s: &mut State, node: usize, c: Completion) {
    let n = &mut s.nodes[node];
    if n.cq.len() >= n.cq_entries {
        n.cq_overrun = true;
        s.stats.cq_overruns += 1;
        return;
    }
    n.cq.push_back(c);
    if std::mem::take(&mut n.armed) {
        if let Some(ch) = &n.channel {
            ch.notify();
        }
    }
}

fn done(
    wr_id: u64,
    qp: QpId,
    status: WcStatus,
    kind: WcKind,
    byte_len: u32,
    imm: Option<u32>,
) -> Completion {
    Completion {
        wr_id,
        qp,
        status,
        kind,
        byte_len,
        imm,
    }
}

/// The region of `node` holding `addr..addr+len` under `key` (`lkey` or `rkey`).
fn region(n: &Node, key: u32, remote: bool, addr: u64, len: u64) -> Option<Region> {
    n.mrs
        .values()
        .find(|r| if remote { r.rkey == key } else { r.lkey == key })
        .filter(|r| addr >= r.addr && addr + len <= r.addr + r.len)
        .copied()
}

enum Step {
    Done,
    Blocked,
}

/// Executes the head of queue pair `q`'s send queue, if it can.
fn step(s: &mut State, q: usize) -> Step {
    let qp = &s.qps[q];
    let (node, local) = (qp.node, qp.local);
    let Some(head) = qp.sq.front().cloned() else {
        return Step::Blocked;
    };
    let complete_sender = |s: &mut State, status: WcStatus| {
        s.qps[q].sq.pop_front();
        complete(
            s,
            node,
            done(head.wr_id, local, status, WcKind::Send, 0, None),
        );
        if status != WcStatus::Success {
            fail(s, q);
        }
    };
    // The peer: alive, connected back, and at the address this end was given.
    let remote = qp.remote.expect("RTS has a remote");
    let r = (remote.qpn - QPN_BASE) as usize;
    let reachable = s.qps.get(r).is_some_and(|rq| {
        s.nodes[rq.node].alive
            && port_of(rq.node).lid == remote.port.lid
            && rq.remote.map(|x| x.qpn) == Some(q as u32 + QPN_BASE)
    });
    match s.qps.get(r).map(|x| x.state) {
        Some(QpState::Rtr | QpState::Rts) if reachable => {}
        Some(QpState::Reset | QpState::Init) if reachable => return Step::Blocked,
        _ => {
            s.stats.retry_exceeded += 1;
            complete_sender(s, WcStatus::RetryExceeded);
            return Step::Done;
        }
    }
    // The local bytes, fetched now.
    let bytes = match &head.source {
        Source::Empty => Vec::new(),
        Source::Inline(b) => b.clone(),
        Source::Sge { addr, len, lkey } => {
            if region(&s.nodes[node], *lkey, false, *addr, u64::from(*len)).is_none() {
                complete_sender(s, WcStatus::LocalError);
                return Step::Done;
            }
            let mut v = vec![0u8; *len as usize];
            // SAFETY: the range lies in a region registered on this node, whose memory the
            // registrant keeps allocated until it deregisters (`Verbs::register`).
            unsafe { std::ptr::copy_nonoverlapping(*addr as *const u8, v.as_mut_ptr(), v.len()) };
            v
        }
    };
    let rnode = s.qps[r].node;
    let consumes_recv = matches!(head.op, Op::Send | Op::Write { imm: Some(_), .. });
    if consumes_recv && s.qps[r].rq.is_empty() {
        s.stats.rnr_naks += 1;
        s.qps[q].rnr_tries += 1;
        if s.rnr_retry != 7 && s.qps[q].rnr_tries > s.rnr_retry {
            complete_sender(s, WcStatus::RnrRetryExceeded);
            return Step::Done;
        }
        return Step::Blocked;
    }
    s.qps[q].rnr_tries = 0;
    let rlocal = s.qps[r].local;
    // A receive of the peer's completes.
    let received = |s: &mut State, wr_id, status, kind, len: usize, imm| {
        complete(s, rnode, done(wr_id, rlocal, status, kind, len as u32, imm));
    };
    match head.op {
        Op::Write {
            remote_addr,
            rkey,
            imm,
        } => {
            let len = bytes.len() as u64;
            // A zero-length write checks no key (it touches no memory).
            if len > 0 && region(&s.nodes[rnode], rkey, true, remote_addr, len).is_none() {
                s.stats.remote_access_errors += 1;
                complete_sender(s, WcStatus::RemoteAccess);
                fail(s, r);
                return Step::Done;
            }
            // SAFETY: the target range lies in a region the peer registered for remote
            // writes and keeps allocated until it deregisters.
            unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), remote_addr as *mut u8, bytes.len())
            };
            s.stats.writes += 1;
            if let Some(imm) = imm {
                let recv = s.qps[r].rq.pop_front().expect("checked");
                let (ok, kind) = (WcStatus::Success, WcKind::RecvWriteImm);
                received(s, recv.wr_id, ok, kind, len as usize, Some(imm));
            }
        }
        Op::Send => {
            let recv = s.qps[r].rq.pop_front().expect("checked");
            let fits = bytes.len() <= recv.len as usize
                && region(
                    &s.nodes[rnode],
                    recv.lkey,
                    false,
                    recv.addr,
                    bytes.len() as u64,
                )
                .is_some();
            if !fits {
                received(s, recv.wr_id, WcStatus::LocalError, WcKind::Recv, 0, None);
                fail(s, r);
                complete_sender(s, WcStatus::RemoteAccess);
                return Step::Done;
            }
            // SAFETY: the receive's range lies in a region the peer registered and keeps
            // allocated until the receive completes.
            unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), recv.addr as *mut u8, bytes.len())
            };
            s.stats.sends += 1;
            received(
                s,
                recv.wr_id,
                WcStatus::Success,
                WcKind::Recv,
                bytes.len(),
                None,
            );
        }
    }
    complete_sender(s, WcStatus::Success);
    Step::Done
}

/// Runs every queue pair's send queue as far as it goes.
fn pump(s: &mut State) {
    loop {
        let mut moved = false;
        for q in 0..s.qps.len() {
            while s.qps[q].state == QpState::Rts && !s.qps[q].sq.is_empty() {
                match step(s, q) {
                    Step::Done => moved = true,
                    Step::Blocked => break,
                }
            }
        }
        if !moved {
            return;
        }
    }
}

/// One node's verbs, in the model.
pub struct ModelVerbs {
    fabric: Fabric,
    node: usize,
    /// Local queue pair ids → the fabric's queue pairs.
    qps: Vec<usize>,
}

impl ModelVerbs {
    /// This node's number on the fabric.
    pub fn node(&self) -> usize {
        self.node
    }

    fn transition(
        &mut self,
        qp: QpId,
        from: QpState,
        to: QpState,
        what: &'static str,
    ) -> Result<usize, VerbsError> {
        let q = self.qps[qp.0];
        let mut s = self.fabric.lock();
        let state = s.qps[q].state;
        if state != from {
            return Err(VerbsError::BadState { qp, state, what });
        }
        s.qps[q].state = to;
        Ok(q)
    }
}

impl Drop for ModelVerbs {
    /// The process is gone.
    fn drop(&mut self) {
        self.fabric.kill(self.node);
    }
}

impl Verbs for ModelVerbs {
    fn port(&self) -> PortAddr {
        port_of(self.node)
    }

    fn max_msg(&self) -> u64 {
        1 << 31
    }

    unsafe fn register(&mut self, addr: *mut u8, len: usize) -> Result<Mr, VerbsError> {
        let mut s = self.fabric.lock();
        let key = s.next_key;
        s.next_key += 2;
        let n = &mut s.nodes[self.node];
        if let Some(b) = &mut n.budget {
            if *b < len as u64 {
                return Err(VerbsError::Register {
                    len,
                    detail: "the model's locked-memory limit".into(),
                });
            }
            *b -= len as u64;
        }
        n.mrs.insert(
            u64::from(key),
            Region {
                addr: addr as u64,
                len: len as u64,
                lkey: key,
                rkey: key + 1,
            },
        );
        Ok(Mr {
            id: MrId(u64::from(key)),
            lkey: key,
            rkey: key + 1,
        })
    }

    fn deregister(&mut self, mr: MrId) {
        let mut s = self.fabric.lock();
        let n = &mut s.nodes[self.node];
        if let Some(r) = n.mrs.remove(&mr.0) {
            if let Some(b) = &mut n.budget {
                *b += r.len;
            }
        }
    }

    fn create_qp(&mut self) -> Result<QpId, VerbsError> {
        let mut s = self.fabric.lock();
        let local = QpId(self.qps.len());
        s.qps.push(ModelQp {
            node: self.node,
            local,
            state: QpState::Reset,
            remote: None,
            sq: VecDeque::new(),
            rq: VecDeque::new(),
            rnr_tries: 0,
            destroyed: false,
        });
        self.qps.push(s.qps.len() - 1);
        Ok(local)
    }

    fn destroy_qp(&mut self, qp: QpId) {
        let q = self.qps[qp.0];
        let mut s = self.fabric.lock();
        let x = &mut s.qps[q];
        // Gone: the peer's sends to it fail ("retry exceeded"); nothing of it completes.
        x.state = QpState::Error;
        x.sq.clear();
        x.rq.clear();
        x.destroyed = true;
    }

    fn qp_num(&self, qp: QpId) -> u32 {
        self.qps[qp.0] as u32 + QPN_BASE
    }

    fn to_init(&mut self, qp: QpId) -> Result<(), VerbsError> {
        self.transition(qp, QpState::Reset, QpState::Init, "INIT needs RESET")
            .map(drop)
    }

    fn to_rtr(&mut self, qp: QpId, remote: &Remote) -> Result<(), VerbsError> {
        let q = self.transition(qp, QpState::Init, QpState::Rtr, "RTR needs INIT")?;
        let mut s = self.fabric.lock();
        s.qps[q].remote = Some(*remote);
        pump(&mut s);
        Ok(())
    }

    fn to_rts(&mut self, qp: QpId) -> Result<(), VerbsError> {
        self.transition(qp, QpState::Rtr, QpState::Rts, "RTS needs RTR")
            .map(drop)
    }

    fn state(&self, qp: QpId) -> QpState {
        self.fabric.lock().qps[self.qps[qp.0]].state
    }

    unsafe fn post_send(&mut self, qp: QpId, wr: &SendWr<'_>) -> Result<(), VerbsError> {
        let q = self.qps[qp.0];
        let mut s = self.fabric.lock();
        let state = s.qps[q].state;
        if state == QpState::Error {
            // Accepted, and flushed at once.
            let node = self.node;
            complete(
                &mut s,
                node,
                done(wr.wr_id, qp, WcStatus::Flushed, WcKind::Send, 0, None),
            );
            return Ok(());
        }
        if state != QpState::Rts {
            return Err(VerbsError::BadState {
                qp,
                state,
                what: "sends need RTS",
            });
        }
        let source = match wr.local {
            Local::Empty => Source::Empty,
            Local::Sge { addr, len, lkey } => Source::Sge { addr, len, lkey },
            Local::Inline(b) if b.len() <= super::ops::INLINE_MAX => Source::Inline(b.to_vec()),
            Local::Inline(b) => {
                return Err(VerbsError::Call {
                    call: "ibv_post_send",
                    detail: format!(
                        "{} inline bytes (at most {})",
                        b.len(),
                        super::ops::INLINE_MAX
                    ),
                })
            }
        };
        s.qps[q].sq.push_back(Pending {
            wr_id: wr.wr_id,
            op: wr.op,
            source,
        });
        pump(&mut s);
        Ok(())
    }

    unsafe fn post_recv(&mut self, qp: QpId, wr: &RecvWr) -> Result<(), VerbsError> {
        let q = self.qps[qp.0];
        let mut s = self.fabric.lock();
        let state = s.qps[q].state;
        match state {
            QpState::Reset => {
                return Err(VerbsError::BadState {
                    qp,
                    state,
                    what: "receives need INIT or later",
                })
            }
            QpState::Error => {
                let local = s.qps[q].local;
                let node = self.node;
                complete(
                    &mut s,
                    node,
                    done(wr.wr_id, local, WcStatus::Flushed, WcKind::Recv, 0, None),
                );
            }
            _ => s.qps[q].rq.push_back(*wr),
        }
        pump(&mut s);
        Ok(())
    }

    fn poll(&mut self, out: &mut Vec<Completion>, max: usize) -> Result<usize, VerbsError> {
        let mut s = self.fabric.lock();
        pump(&mut s);
        let n = &mut s.nodes[self.node];
        if n.cq_overrun {
            return Err(VerbsError::Call {
                call: "ibv_poll_cq",
                detail: format!(
                    "the completion queue overran its {} entries (on a device: IBV_EVENT_CQ_ERR, every queue pair on it in error)",
                    n.cq_entries
                ),
            });
        }
        let k = max.min(n.cq.len());
        out.extend(n.cq.drain(..k));
        Ok(k)
    }

    fn cq_entries(&self) -> usize {
        self.fabric.lock().nodes[self.node].cq_entries
    }

    fn wait_fd(&self) -> Option<RawFd> {
        let s = self.fabric.lock();
        s.nodes[self.node].channel.as_ref().map(|c| c.raw())
    }

    /// Takes the pending event (reads the eventfd) and arms for the next completion.
    fn arm(&mut self) -> Result<(), VerbsError> {
        let mut s = self.fabric.lock();
        let n = &mut s.nodes[self.node];
        if let Some(ch) = &n.channel {
            ch.clear();
        }
        n.armed = true;
        Ok(())
    }

    fn resize_cq(&mut self, entries: usize) -> Result<(), VerbsError> {
        let mut s = self.fabric.lock();
        let n = &mut s.nodes[self.node];
        if entries < n.cq.len() {
            return Err(VerbsError::Call {
                call: "ibv_resize_cq",
                detail: format!("{entries} entries, fewer than the {} it holds", n.cq.len()),
            });
        }
        n.cq_entries = entries;
        Ok(())
    }
}
