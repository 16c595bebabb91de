//! The real verbs backend over libibverbs (rdma-sys; cargo feature `verbs`), one file per
//! verbs object as the sideway crate arranges them: [`device`] (the opened device),
//! [`pd`] (protection domain), [`cq`] (completion queue and channel), [`qp`] (RC queue
//! pair), [`mr`] (memory region). Each holds an `Arc` to its parent, so dropping them in any
//! order destroys children first.
//!
//! It builds (CI builds it) but has not run: the machines pipecast is developed on have no
//! RDMA device and no kernel RDMA support. The link's protocol is tested on the model
//! (`../model.rs`) instead.

pub mod cq;
pub mod device;
pub mod mr;
pub mod pd;
pub mod qp;

use super::ops::{
    Completion, Mr, MrId, PortAddr, QpId, QpState, RecvWr, Remote, SendWr, Verbs, VerbsError,
    WcKind, WcStatus,
};
use cq::Cq;
pub use device::{Context, DeviceConfig};
use mr::MemoryRegion;
use pd::Pd;
use qp::Qp;
use rdma_sys as ib;
use std::collections::BTreeMap;
use std::sync::Arc;

/// One process's verbs on one device port.
pub struct DeviceVerbs {
    // Children before parents (fields drop in order; the `Arc`s keep it right anyway).
    /// `None` once destroyed (ids are never reused).
    qps: Vec<Option<(Qp, QpState)>>,
    by_num: BTreeMap<u32, QpId>,
    mrs: BTreeMap<u64, MemoryRegion>,
    next_mr: u64,
    cq: Arc<Cq>,
    pd: Arc<Pd>,
    ctx: Arc<Context>,
    port: PortAddr,
    max_msg: u64,
    send_depth: u32,
    recv_depth: u32,
    wc: Vec<ib::ibv_wc>,
}

impl DeviceVerbs {
    /// Opens the device and port of `config`, with a completion queue of `cq_entries`
    /// completions and queue pairs of `send_depth` sends and `recv_depth` receives.
    pub fn open(
        config: &DeviceConfig,
        cq_entries: usize,
        send_depth: u32,
        recv_depth: u32,
    ) -> Result<DeviceVerbs, VerbsError> {
        let ctx = Arc::new(Context::open(config)?);
        let (port, max_msg) = ctx.port(config)?;
        let pd = Arc::new(Pd::new(&ctx)?);
        let cq = Arc::new(Cq::new(&ctx, entries(cq_entries))?);
        Ok(DeviceVerbs {
            qps: Vec::new(),
            by_num: BTreeMap::new(),
            mrs: BTreeMap::new(),
            next_mr: 1,
            cq,
            pd,
            ctx,
            port,
            max_msg: u64::from(max_msg),
            send_depth,
            recv_depth,
            wc: Vec::new(),
        })
    }

    /// `mlx5_0:1` and the GID index: what runs.
    pub fn describe(&self) -> String {
        format!(
            "verbs:{}:{} gid {}",
            self.ctx.name, self.port.port, self.port.gid_index
        )
    }

    fn qp(&mut self, qp: QpId) -> Result<&mut (Qp, QpState), VerbsError> {
        self.qps
            .get_mut(qp.0)
            .and_then(Option::as_mut)
            .ok_or(VerbsError::BadState {
                qp,
                state: QpState::Error,
                what: "the queue pair was destroyed",
            })
    }
}

/// A completion queue size as libibverbs takes it.
fn entries(n: usize) -> i32 {
    n.clamp(1, i32::MAX as usize) as i32
}

fn status(s: ib::ibv_wc_status::Type) -> WcStatus {
    use ib::ibv_wc_status as S;
    match s {
        S::IBV_WC_SUCCESS => WcStatus::Success,
        S::IBV_WC_LOC_LEN_ERR | S::IBV_WC_LOC_PROT_ERR | S::IBV_WC_LOC_QP_OP_ERR => {
            WcStatus::LocalError
        }
        S::IBV_WC_REM_ACCESS_ERR | S::IBV_WC_REM_INV_REQ_ERR => WcStatus::RemoteAccess,
        S::IBV_WC_RNR_RETRY_EXC_ERR => WcStatus::RnrRetryExceeded,
        S::IBV_WC_RETRY_EXC_ERR => WcStatus::RetryExceeded,
        S::IBV_WC_WR_FLUSH_ERR => WcStatus::Flushed,
        other => WcStatus::Other(other),
    }
}

impl Verbs for DeviceVerbs {
    fn port(&self) -> PortAddr {
        self.port
    }

    fn max_msg(&self) -> u64 {
        self.max_msg
    }

    unsafe fn register(&mut self, addr: *mut u8, len: usize) -> Result<Mr, VerbsError> {
        // SAFETY: the caller keeps the bytes allocated until `deregister` (this trait's
        // contract), which drops the region.
        let mr = unsafe { MemoryRegion::new(&self.pd, addr, len) }?;
        let id = MrId(self.next_mr);
        self.next_mr += 1;
        let keys = Mr {
            id,
            lkey: mr.lkey(),
            rkey: mr.rkey(),
        };
        self.mrs.insert(id.0, mr);
        Ok(keys)
    }

    fn deregister(&mut self, mr: MrId) {
        self.mrs.remove(&mr.0);
    }

    fn create_qp(&mut self) -> Result<QpId, VerbsError> {
        let qp = Qp::new(&self.pd, &self.cq, self.send_depth, self.recv_depth)?;
        let id = QpId(self.qps.len());
        self.by_num.insert(qp.num(), id);
        self.qps.push(Some((qp, QpState::Reset)));
        Ok(id)
    }

    fn destroy_qp(&mut self, qp: QpId) {
        // Dropping the `Qp` calls ibv_destroy_qp; completions of it still in the completion
        // queue then name an unknown queue pair number, which the link ignores.
        if let Some((q, _)) = self.qps.get_mut(qp.0).and_then(Option::take) {
            self.by_num.remove(&q.num());
        }
    }

    fn qp_num(&self, qp: QpId) -> u32 {
        match self.qps.get(qp.0) {
            Some(Some((q, _))) => q.num(),
            _ => 0,
        }
    }

    fn to_init(&mut self, qp: QpId) -> Result<(), VerbsError> {
        let port = self.port.port;
        let q = self.qp(qp)?;
        q.0.to_init(port)?;
        q.1 = QpState::Init;
        Ok(())
    }

    fn to_rtr(&mut self, qp: QpId, remote: &Remote) -> Result<(), VerbsError> {
        let (port, gid_index) = (self.port.port, self.port.gid_index);
        let q = self.qp(qp)?;
        q.0.to_rtr(remote, port, gid_index)?;
        q.1 = QpState::Rtr;
        Ok(())
    }

    fn to_rts(&mut self, qp: QpId) -> Result<(), VerbsError> {
        let q = self.qp(qp)?;
        q.0.to_rts()?;
        q.1 = QpState::Rts;
        Ok(())
    }

    fn state(&self, qp: QpId) -> QpState {
        match self.qps.get(qp.0) {
            Some(Some((_, s))) => *s,
            _ => QpState::Error,
        }
    }

    unsafe fn post_send(&mut self, qp: QpId, wr: &SendWr<'_>) -> Result<(), VerbsError> {
        // SAFETY: the caller's contract is the queue pair's (same protection domain).
        unsafe { self.qp(qp)?.0.post_send(wr) }
    }

    unsafe fn post_recv(&mut self, qp: QpId, wr: &RecvWr) -> Result<(), VerbsError> {
        // SAFETY: the caller's contract is the queue pair's (same protection domain).
        unsafe { self.qp(qp)?.0.post_recv(wr) }
    }

    fn poll(&mut self, out: &mut Vec<Completion>, max: usize) -> Result<usize, VerbsError> {
        if self.wc.len() < max {
            // SAFETY: zeroed is a valid ibv_wc (integers and a union of integers).
            self.wc
                .resize_with(max, || unsafe { std::mem::zeroed::<ib::ibv_wc>() });
        }
        let n = self.cq.poll(&mut self.wc[..max])?;
        for wc in &self.wc[..n] {
            let with_imm = wc.wc_flags & ib::ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0;
            // SAFETY: with IBV_WC_WITH_IMM the union holds the immediate.
            let imm = with_imm
                .then(|| u32::from_be(unsafe { wc.imm_data_invalidated_rkey_union.imm_data }));
            let kind = match wc.opcode {
                ib::ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM => WcKind::RecvWriteImm,
                ib::ibv_wc_opcode::IBV_WC_RECV => WcKind::Recv,
                // A flushed receive reports no opcode: its id says it was a receive.
                _ => WcKind::Send,
            };
            let qp = self
                .by_num
                .get(&wc.qp_num)
                .copied()
                .unwrap_or(QpId(usize::MAX));
            if let Some(Some(q)) = self.qps.get_mut(qp.0) {
                if wc.status != ib::ibv_wc_status::IBV_WC_SUCCESS {
                    q.1 = QpState::Error;
                }
            }
            out.push(Completion {
                wr_id: wc.wr_id,
                qp,
                status: status(wc.status),
                kind,
                byte_len: wc.byte_len,
                imm,
            });
        }
        Ok(n)
    }

    fn cq_entries(&self) -> usize {
        self.cq.entries()
    }

    fn resize_cq(&mut self, entries: usize) -> Result<(), VerbsError> {
        self.cq.resize(self::entries(entries))
    }

    fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(self.cq.fd())
    }

    fn arm(&mut self) -> Result<(), VerbsError> {
        self.cq.arm()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// These machines have no RDMA device: opening one fails with an error that names the
    /// problem (run it on a host with a device and it opens instead).
    #[test]
    fn without_a_device_the_error_names_the_problem() {
        match DeviceVerbs::open(&DeviceConfig::default(), 16, 8, 8) {
            Ok(v) => eprintln!("an RDMA device is present here: {}", v.describe()),
            Err(e) => {
                let text = e.to_string();
                eprintln!("{text}");
                assert!(
                    text.starts_with("no RDMA device: ibv_get_device_list returned none"),
                    "{text}"
                );
            }
        }
    }
}
