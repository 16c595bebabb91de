//! The verbs operations the link relies on, and nothing more: register memory, create a
//! reliable-connected queue pair and walk it RESET → INIT → RTR → RTS, post RDMA WRITE (with
//! or without an immediate), post small inline SENDs and receives, poll one completion queue.
//!
//! Two implementations: the real one over libibverbs (`sys/`, cargo feature `verbs`) and an
//! in-memory model of exactly these semantics (`model.rs`, tests only), on which the link's
//! protocol is tested here where no RDMA device exists.

use std::os::fd::RawFd;

/// A queue pair, as the backend numbers it locally (an index, not the wire QP number).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct QpId(pub usize);

/// A registered memory region, as the backend numbers it locally.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct MrId(pub u64);

/// What a registration gives back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mr {
    pub id: MrId,
    /// For this process's own work requests.
    pub lkey: u32,
    /// For the peers' RDMA writes into it.
    pub rkey: u32,
}

/// Where a port is on the fabric: what a peer needs to address it (InfiniBand: the LID;
/// RoCE v2: the GID at the selected index, an IPv6 or IPv4-mapped address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortAddr {
    pub port: u8,
    pub gid_index: u8,
    pub lid: u16,
    pub gid: [u8; 16],
    /// The active path MTU, as `enum ibv_mtu` numbers it (1: 256 … 5: 4096).
    pub mtu: u8,
}

/// The far end of a queue pair: its number and its port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Remote {
    pub qpn: u32,
    pub port: PortAddr,
}

/// A queue pair's state (`enum ibv_qp_state`, the ones this link meets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpState {
    Reset,
    Init,
    /// Ready to receive: the remote end is known.
    Rtr,
    /// Ready to send.
    Rts,
    /// A work request failed: everything still queued completes with `Flushed`.
    Error,
}

/// The bytes a send work request takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Local<'a> {
    /// Nothing (a zero-length write with immediate).
    Empty,
    /// Registered memory at `addr` (`lkey` of its region).
    Sge { addr: u64, len: u32, lkey: u32 },
    /// Copied into the work request when it is posted (`IBV_SEND_INLINE`): needs no
    /// registration; at most [`INLINE_MAX`] bytes.
    Inline(&'a [u8]),
}

/// Largest inline payload the link uses (its control messages).
pub const INLINE_MAX: usize = 64;

/// What a send work request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// RDMA WRITE into the peer's region `rkey` at `remote_addr`; with an immediate it also
    /// consumes one of the peer's posted receives and completes there carrying `imm`.
    Write {
        remote_addr: u64,
        rkey: u32,
        imm: Option<u32>,
    },
    /// SEND into the peer's next posted receive.
    Send,
}

/// One send work request (always signaled: each completes on the completion queue).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWr<'a> {
    pub wr_id: u64,
    pub op: Op,
    pub local: Local<'a>,
}

/// One receive work request: where a SEND lands (a WRITE with immediate uses none of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvWr {
    pub wr_id: u64,
    pub addr: u64,
    pub len: u32,
    pub lkey: u32,
}

/// How a work request ended (`enum ibv_wc_status`, the ones this link tells apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcStatus {
    Success,
    /// A local address or key was wrong (`IBV_WC_LOC_PROT_ERR`, `IBV_WC_LOC_LEN_ERR`).
    LocalError,
    /// The peer refused an RDMA access: bad rkey, or outside its region
    /// (`IBV_WC_REM_ACCESS_ERR`, `IBV_WC_REM_INV_REQ_ERR`).
    RemoteAccess,
    /// The peer had no receive posted, every retry too (`IBV_WC_RNR_RETRY_EXC_ERR`).
    RnrRetryExceeded,
    /// The peer never answered (`IBV_WC_RETRY_EXC_ERR`): it is gone.
    RetryExceeded,
    /// The queue pair was in the error state (`IBV_WC_WR_FLUSH_ERR`).
    Flushed,
    Other(u32),
}

/// What a completion reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcKind {
    /// A send work request of this process finished.
    Send,
    /// A SEND arrived into a posted receive (`byte_len` bytes; `imm` if it carried one).
    Recv,
    /// A WRITE with immediate arrived (its bytes are in place; `byte_len` of them).
    RecvWriteImm,
}

/// One completion-queue entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    pub wr_id: u64,
    pub qp: QpId,
    pub status: WcStatus,
    pub kind: WcKind,
    pub byte_len: u32,
    pub imm: Option<u32>,
}

/// A verbs call that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerbsError {
    #[error("no RDMA device: ibv_get_device_list returned none{0}")]
    NoDevice(String),
    #[error("this pipecast was built without RDMA verbs: rebuild it with `cargo build --features verbs` (needs libibverbs-dev, librdmacm-dev, libclang-dev)")]
    NotBuilt,
    #[error("{call}: {detail}")]
    Call { call: &'static str, detail: String },
    /// Registration refused (locked-memory limit, …): the link falls back to its rings.
    #[error("cannot register {len} bytes: {detail}")]
    Register { len: usize, detail: String },
    #[error("queue pair {qp:?} is in state {state:?}: {what}")]
    BadState {
        qp: QpId,
        state: QpState,
        what: &'static str,
    },
}

/// Exactly the verbs operations the link relies on.
pub trait Verbs: Send {
    /// This process's port on the fabric.
    fn port(&self) -> PortAddr;

    /// Largest message one work request may move (`max_msg_sz`).
    fn max_msg(&self) -> u64;

    /// Registers `len` bytes at `addr` for local use and remote writes.
    ///
    /// # Safety
    /// The bytes must stay allocated (and not be handed to anybody else) until
    /// [`Verbs::deregister`] returned for this region: the device (or the model) writes into
    /// them whenever a peer's RDMA WRITE arrives.
    unsafe fn register(&mut self, addr: *mut u8, len: usize) -> Result<Mr, VerbsError>;

    /// Forgets a region: peers' writes into it fail from now on.
    fn deregister(&mut self, mr: MrId);

    /// A reliable-connected queue pair in state RESET, on the one completion queue.
    fn create_qp(&mut self) -> Result<QpId, VerbsError>;

    /// Destroys a queue pair (`ibv_destroy_qp`): what it had queued is dropped without
    /// completions, and its peer's sends to it fail from now on. The link destroys only idle
    /// queue pairs (nothing of its own in flight), and afterwards ignores completions of it
    /// still in the completion queue. Its id is never reused.
    fn destroy_qp(&mut self, qp: QpId);

    /// The queue pair's number on the wire (what the peer puts in its RTR transition).
    fn qp_num(&self, qp: QpId) -> u32;

    /// RESET → INIT (port, remote write access).
    fn to_init(&mut self, qp: QpId) -> Result<(), VerbsError>;

    /// INIT → RTR: connected to `remote`.
    fn to_rtr(&mut self, qp: QpId, remote: &Remote) -> Result<(), VerbsError>;

    /// RTR → RTS.
    fn to_rts(&mut self, qp: QpId) -> Result<(), VerbsError>;

    /// The queue pair's current state.
    fn state(&self, qp: QpId) -> QpState;

    /// Posts one send work request (fails at once unless the queue pair is in RTS).
    ///
    /// # Safety
    /// A `Local::Sge` range must lie in a region registered here and stay allocated and
    /// unchanged until this work request's completion was polled.
    unsafe fn post_send(&mut self, qp: QpId, wr: &SendWr<'_>) -> Result<(), VerbsError>;

    /// Posts one receive work request.
    ///
    /// # Safety
    /// The range must lie in a region registered here and stay allocated, untouched by
    /// this process, until the receive's completion was polled.
    unsafe fn post_recv(&mut self, qp: QpId, wr: &RecvWr) -> Result<(), VerbsError>;

    /// Appends up to `max` completions to `out`; how many.
    fn poll(&mut self, out: &mut Vec<Completion>, max: usize) -> Result<usize, VerbsError>;

    /// How many completions the completion queue holds. One more is an overrun, fatal on a
    /// device (`IBV_EVENT_CQ_ERR`: the queue and every queue pair on it fail): the link keeps
    /// the completions it may have outstanding within this (`LinkConfig::cq_entries`).
    fn cq_entries(&self) -> usize;

    /// Resizes the completion queue to at least `entries` (`ibv_resize_cq`), keeping what
    /// it holds: grows it, or shrinks it (which fails when it holds more than `entries`;
    /// some providers cannot resize at all).
    fn resize_cq(&mut self, entries: usize) -> Result<(), VerbsError>;

    /// A descriptor that becomes readable when a completion arrives after [`Verbs::arm`]
    /// (a completion channel); `None` when the backend has none (then a poll is all there
    /// is: the link does not wait).
    fn wait_fd(&self) -> Option<RawFd> {
        None
    }

    /// Asks for the next completion to make [`Verbs::wait_fd`] readable (`ibv_req_notify_cq`),
    /// after taking any event already there.
    fn arm(&mut self) -> Result<(), VerbsError> {
        Ok(())
    }
}

/// A boxed backend is a backend (the communicator picks one at run time).
impl Verbs for Box<dyn Verbs> {
    fn port(&self) -> PortAddr {
        (**self).port()
    }
    fn max_msg(&self) -> u64 {
        (**self).max_msg()
    }
    unsafe fn register(&mut self, addr: *mut u8, len: usize) -> Result<Mr, VerbsError> {
        // SAFETY: the caller's contract is the inner backend's.
        unsafe { (**self).register(addr, len) }
    }
    fn deregister(&mut self, mr: MrId) {
        (**self).deregister(mr)
    }
    fn create_qp(&mut self) -> Result<QpId, VerbsError> {
        (**self).create_qp()
    }
    fn destroy_qp(&mut self, qp: QpId) {
        (**self).destroy_qp(qp)
    }
    fn qp_num(&self, qp: QpId) -> u32 {
        (**self).qp_num(qp)
    }
    fn to_init(&mut self, qp: QpId) -> Result<(), VerbsError> {
        (**self).to_init(qp)
    }
    fn to_rtr(&mut self, qp: QpId, remote: &Remote) -> Result<(), VerbsError> {
        (**self).to_rtr(qp, remote)
    }
    fn to_rts(&mut self, qp: QpId) -> Result<(), VerbsError> {
        (**self).to_rts(qp)
    }
    fn state(&self, qp: QpId) -> QpState {
        (**self).state(qp)
    }
    unsafe fn post_send(&mut self, qp: QpId, wr: &SendWr<'_>) -> Result<(), VerbsError> {
        // SAFETY: the caller's contract is the inner backend's.
        unsafe { (**self).post_send(qp, wr) }
    }
    unsafe fn post_recv(&mut self, qp: QpId, wr: &RecvWr) -> Result<(), VerbsError> {
        // SAFETY: the caller's contract is the inner backend's.
        unsafe { (**self).post_recv(qp, wr) }
    }
    fn poll(&mut self, out: &mut Vec<Completion>, max: usize) -> Result<usize, VerbsError> {
        (**self).poll(out, max)
    }
    fn cq_entries(&self) -> usize {
        (**self).cq_entries()
    }
    fn resize_cq(&mut self, entries: usize) -> Result<(), VerbsError> {
        (**self).resize_cq(entries)
    }
    fn wait_fd(&self) -> Option<RawFd> {
        (**self).wait_fd()
    }
    fn arm(&mut self) -> Result<(), VerbsError> {
        (**self).arm()
    }
}
