//! A reliable-connected queue pair and its state transitions.

use super::super::ops::{Local, Op, RecvWr, Remote, SendWr, VerbsError, INLINE_MAX};
use super::cq::Cq;
use super::device::errno;
use super::pd::Pd;
use rdma_sys as ib;
use std::sync::Arc;

pub struct Qp {
    ptr: *mut ib::ibv_qp,
    _pd: Arc<Pd>,
    _cq: Arc<Cq>,
}

// SAFETY: used by one thread at a time (the link's `&mut`); destroyed only in `Drop`.
unsafe impl Send for Qp {}

/// RC transport timers: 4.096 µs × 2^14 ≈ 67 ms per try, 7 tries (a dead peer is noticed
/// in about half a second); receiver-not-ready retried for ever (7), 12 ms apart (14).
const TIMEOUT: u8 = 14;
const RETRY: u8 = 7;
const RNR_RETRY: u8 = 7;
const MIN_RNR_TIMER: u8 = 14;

impl Qp {
    /// An RC queue pair with both queues on `cq`, every send signaled.
    pub fn new(pd: &Arc<Pd>, cq: &Arc<Cq>, send: u32, recv: u32) -> Result<Qp, VerbsError> {
        // SAFETY: zeroed is a valid ibv_qp_init_attr (pointers null, integers 0).
        let mut attr: ib::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        attr.send_cq = cq.ptr;
        attr.recv_cq = cq.ptr;
        attr.cap.max_send_wr = send;
        attr.cap.max_recv_wr = recv;
        attr.cap.max_send_sge = 1;
        attr.cap.max_recv_sge = 1;
        attr.cap.max_inline_data = INLINE_MAX as u32;
        attr.qp_type = ib::ibv_qp_type::IBV_QPT_RC;
        attr.sq_sig_all = 1;
        // SAFETY: a live protection domain and completion queue, a valid attribute block.
        let ptr = unsafe { ib::ibv_create_qp(pd.ptr, &mut attr) };
        if ptr.is_null() {
            return Err(VerbsError::Call {
                call: "ibv_create_qp",
                detail: errno(),
            });
        }
        Ok(Qp {
            ptr,
            _pd: pd.clone(),
            _cq: cq.clone(),
        })
    }

    pub fn num(&self) -> u32 {
        // SAFETY: a live queue pair.
        unsafe { (*self.ptr).qp_num }
    }

    fn modify(
        &mut self,
        attr: &mut ib::ibv_qp_attr,
        mask: ib::ibv_qp_attr_mask,
        what: &'static str,
    ) -> Result<(), VerbsError> {
        // SAFETY: a live queue pair and a valid attribute block for `mask`.
        let rc = unsafe { ib::ibv_modify_qp(self.ptr, attr, mask.0 as i32) };
        if rc != 0 {
            return Err(VerbsError::Call {
                call: "ibv_modify_qp",
                detail: format!("{what}: {}", std::io::Error::from_raw_os_error(rc)),
            });
        }
        Ok(())
    }

    /// RESET → INIT on `port`, remote writes allowed.
    pub fn to_init(&mut self, port: u8) -> Result<(), VerbsError> {
        use ib::ibv_qp_attr_mask as M;
        // SAFETY: zeroed is a valid ibv_qp_attr.
        let mut a: ib::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ib::ibv_qp_state::IBV_QPS_INIT;
        a.port_num = port;
        a.pkey_index = 0;
        a.qp_access_flags = (ib::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE
            | ib::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE)
            .0;
        self.modify(
            &mut a,
            M::IBV_QP_STATE | M::IBV_QP_PKEY_INDEX | M::IBV_QP_PORT | M::IBV_QP_ACCESS_FLAGS,
            "to INIT",
        )
    }

    /// INIT → RTR towards `remote`, through this port's GID index (RoCE, and InfiniBand
    /// across subnets, need the global route; a LID suffices within an InfiniBand subnet).
    pub fn to_rtr(
        &mut self,
        remote: &Remote,
        local_port: u8,
        gid_index: u8,
    ) -> Result<(), VerbsError> {
        use ib::ibv_qp_attr_mask as M;
        // SAFETY: zeroed is a valid ibv_qp_attr.
        let mut a: ib::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ib::ibv_qp_state::IBV_QPS_RTR;
        a.path_mtu = u32::from(remote.port.mtu.clamp(1, 5));
        a.dest_qp_num = remote.qpn;
        a.rq_psn = 0;
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = MIN_RNR_TIMER;
        a.ah_attr.dlid = remote.port.lid;
        a.ah_attr.port_num = local_port;
        if remote.port.gid != [0; 16] {
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid = ib::ibv_gid {
                raw: remote.port.gid,
            };
            a.ah_attr.grh.sgid_index = gid_index;
            a.ah_attr.grh.hop_limit = 64;
        }
        self.modify(
            &mut a,
            M::IBV_QP_STATE
                | M::IBV_QP_AV
                | M::IBV_QP_PATH_MTU
                | M::IBV_QP_DEST_QPN
                | M::IBV_QP_RQ_PSN
                | M::IBV_QP_MAX_DEST_RD_ATOMIC
                | M::IBV_QP_MIN_RNR_TIMER,
            "to RTR",
        )
    }

    /// RTR → RTS.
    pub fn to_rts(&mut self) -> Result<(), VerbsError> {
        use ib::ibv_qp_attr_mask as M;
        // SAFETY: zeroed is a valid ibv_qp_attr.
        let mut a: ib::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ib::ibv_qp_state::IBV_QPS_RTS;
        a.timeout = TIMEOUT;
        a.retry_cnt = RETRY;
        a.rnr_retry = RNR_RETRY;
        a.sq_psn = 0;
        a.max_rd_atomic = 1;
        self.modify(
            &mut a,
            M::IBV_QP_STATE
                | M::IBV_QP_TIMEOUT
                | M::IBV_QP_RETRY_CNT
                | M::IBV_QP_RNR_RETRY
                | M::IBV_QP_SQ_PSN
                | M::IBV_QP_MAX_QP_RD_ATOMIC,
            "to RTS",
        )
    }

    /// Posts one signaled send work request.
    ///
    /// # Safety
    /// A `Local::Sge` range must lie in a region registered on this queue pair's protection
    /// domain and stay allocated and unchanged until the completion was polled.
    pub unsafe fn post_send(&mut self, wr: &SendWr<'_>) -> Result<(), VerbsError> {
        let (mut sge, num_sge, mut flags) = match wr.local {
            Local::Empty => (
                ib::ibv_sge {
                    addr: 0,
                    length: 0,
                    lkey: 0,
                },
                0,
                0,
            ),
            Local::Sge { addr, len, lkey } => (
                ib::ibv_sge {
                    addr,
                    length: len,
                    lkey,
                },
                1,
                0,
            ),
            Local::Inline(b) => (
                ib::ibv_sge {
                    addr: b.as_ptr() as u64,
                    length: b.len() as u32,
                    lkey: 0,
                },
                1,
                ib::ibv_send_flags::IBV_SEND_INLINE.0,
            ),
        };
        flags |= ib::ibv_send_flags::IBV_SEND_SIGNALED.0;
        // SAFETY: zeroed is a valid ibv_send_wr (null next, no SGEs).
        let mut w: ib::ibv_send_wr = unsafe { std::mem::zeroed() };
        w.wr_id = wr.wr_id;
        w.sg_list = &mut sge;
        w.num_sge = num_sge;
        w.send_flags = flags;
        match wr.op {
            Op::Write {
                remote_addr,
                rkey,
                imm,
            } => {
                w.opcode = match imm {
                    Some(i) => {
                        w.imm_data_invalidated_rkey_union.imm_data = i.to_be();
                        ib::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM
                    }
                    None => ib::ibv_wr_opcode::IBV_WR_RDMA_WRITE,
                };
                w.wr.rdma = ib::rdma_t { remote_addr, rkey };
            }
            Op::Send => w.opcode = ib::ibv_wr_opcode::IBV_WR_SEND,
        }
        let mut bad = std::ptr::null_mut();
        // SAFETY: a live queue pair; `w` and `sge` outlive the call (inline data is copied
        // during it; registered memory stays valid by the caller's contract).
        let rc = unsafe { ib::ibv_post_send(self.ptr, &mut w, &mut bad) };
        if rc != 0 {
            return Err(VerbsError::Call {
                call: "ibv_post_send",
                detail: std::io::Error::from_raw_os_error(rc).to_string(),
            });
        }
        Ok(())
    }

    /// Posts one receive work request.
    ///
    /// # Safety
    /// The range must lie in a region registered on this queue pair's protection domain and
    /// stay allocated until the completion was polled.
    pub unsafe fn post_recv(&mut self, wr: &RecvWr) -> Result<(), VerbsError> {
        let mut sge = ib::ibv_sge {
            addr: wr.addr,
            length: wr.len,
            lkey: wr.lkey,
        };
        // SAFETY: zeroed is a valid ibv_recv_wr.
        let mut w: ib::ibv_recv_wr = unsafe { std::mem::zeroed() };
        w.wr_id = wr.wr_id;
        w.sg_list = &mut sge;
        w.num_sge = 1;
        let mut bad = std::ptr::null_mut();
        // SAFETY: a live queue pair; `w` and `sge` outlive the call.
        let rc = unsafe { ib::ibv_post_recv(self.ptr, &mut w, &mut bad) };
        if rc != 0 {
            return Err(VerbsError::Call {
                call: "ibv_post_recv",
                detail: std::io::Error::from_raw_os_error(rc).to_string(),
            });
        }
        Ok(())
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once, before its protection domain and
        // completion queue (held alive by this queue pair).
        unsafe { ib::ibv_destroy_qp(self.ptr) };
    }
}
