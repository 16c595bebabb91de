//! The XDP program that hands pipecast's raw Ethernet multicast frames to an AF_XDP socket
//! ([`super::xsk`]), and the `bpf(2)` calls that load and attach it, with no compiler and no
//! object file: the program is a dozen eBPF instructions written here ([`filter_program`]).
//!
//! It redirects a frame to the `XSKMAP` entry of the queue it arrived on when its EtherType
//! is the carrier's (0x88B6) and its destination MAC is one of a few (the job's group, the
//! interface's own), and passes every other frame to the kernel's stack (`XDP_PASS`), so
//! that LLDP, TCP and the raw Ethernet link's 0x88B5 frames go on as before. When the queue
//! has no socket in the map, `bpf_redirect_map`'s flags make it pass the frame too.
//!
//! It is attached through a BPF link (`BPF_LINK_CREATE`, attach type `BPF_XDP`): closing the
//! link's descriptor (dropping [`XdpFilter`]) detaches it, so a process that dies leaves no
//! program on the interface. Native (driver) mode is tried first, then generic (SKB) mode,
//! which every device has; veth refuses native mode when its peer's MTU needs more than a
//! page per frame.

use crate::transport::TransportError;
use crate::wire::frame::Mac;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

// bpf(2) commands and types (linux/bpf.h).
const BPF_MAP_CREATE: i32 = 0;
const BPF_MAP_UPDATE_ELEM: i32 = 2;
const BPF_PROG_LOAD: i32 = 5;
const BPF_LINK_CREATE: i32 = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const BPF_PSEUDO_MAP_FD: u8 = 1;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
// linux/if_link.h
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
// enum xdp_action
const XDP_PASS: i32 = 2;
/// The Ethernet header's length: destination, source, EtherType.
const ETH_HLEN: i32 = 14;

/// One eBPF instruction (`struct bpf_insn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    pub code: u8,
    pub dst: u8,
    pub src: u8,
    pub off: i16,
    pub imm: i32,
}

impl Insn {
    const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn {
            code,
            dst,
            src,
            off,
            imm,
        }
    }

    /// Its 8 bytes as the kernel reads them (little-endian host).
    pub fn encode(self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0] = self.code;
        b[1] = (self.dst & 0xf) | (self.src << 4);
        b[2..4].copy_from_slice(&self.off.to_le_bytes());
        b[4..8].copy_from_slice(&self.imm.to_le_bytes());
        b
    }
}

// Opcodes (class | op | source).
const MOV64_X: u8 = 0x07 | 0xb0 | 0x08; // r_dst = r_src
const MOV64_K: u8 = 0x07 | 0xb0; // r_dst = imm
const ADD64_K: u8 = 0x07; // r_dst += imm
const LDX_W: u8 = 0x01 | 0x60; // r_dst = *(u32 *)(r_src + off)
const LDX_H: u8 = 0x01 | 0x60 | 0x08; // r_dst = *(u16 *)(r_src + off)
const LD_DW_IMM: u8 = 0x18; // r_dst = imm64 (two slots)
const JGT_X: u8 = 0x05 | 0x20 | 0x08; // if r_dst > r_src goto +off
const JNE32_K: u8 = 0x06 | 0x50; // if (u32)r_dst != imm goto +off
const JA: u8 = 0x05; // goto +off
const CALL: u8 = 0x05 | 0x80;
const EXIT: u8 = 0x05 | 0x90;

/// Where a jump goes, resolved once the program is laid out.
#[derive(Clone, Copy)]
enum Target {
    Pass,
    Redirect,
    Next(usize),
}

/// The filter for frames of `ethertype` to one of `macs` (every destination when empty),
/// redirected to `XSKMAP` `map_fd` at the frame's receive queue.
pub fn filter_program(ethertype: u16, macs: &[Mac], map_fd: RawFd) -> Vec<Insn> {
    // (instruction, where its jump goes); Next(i): the first instruction of MAC i + 1.
    let mut p: Vec<(Insn, Option<Target>)> = Vec::new();
    let op = |p: &mut Vec<_>, i: Insn| p.push((i, None));
    let jump = |p: &mut Vec<_>, i: Insn, t: Target| p.push((i, Some(t)));
    op(&mut p, Insn::new(MOV64_X, 6, 1, 0, 0)); // r6 = ctx
    op(&mut p, Insn::new(LDX_W, 2, 6, 0, 0)); // r2 = ctx->data
    op(&mut p, Insn::new(LDX_W, 3, 6, 4, 0)); // r3 = ctx->data_end
    op(&mut p, Insn::new(MOV64_X, 4, 2, 0, 0)); // r4 = data
    op(&mut p, Insn::new(ADD64_K, 4, 0, 0, ETH_HLEN)); // r4 += 14
    jump(&mut p, Insn::new(JGT_X, 4, 3, 0, 0), Target::Pass); // shorter than a header
    op(&mut p, Insn::new(LDX_H, 5, 2, 12, 0)); // r5 = EtherType as stored
    let ethertype_stored = u16::from_le_bytes(ethertype.to_be_bytes());
    jump(
        &mut p,
        Insn::new(JNE32_K, 5, 0, 0, i32::from(ethertype_stored)),
        Target::Pass,
    );
    let mut starts = Vec::new();
    for (i, mac) in macs.iter().enumerate() {
        starts.push(p.len());
        let lo = u32::from_le_bytes([mac[0], mac[1], mac[2], mac[3]]) as i32;
        let hi = i32::from(u16::from_le_bytes([mac[4], mac[5]]));
        op(&mut p, Insn::new(LDX_W, 5, 2, 0, 0)); // destination bytes 0..4
        jump(&mut p, Insn::new(JNE32_K, 5, 0, 0, lo), Target::Next(i));
        op(&mut p, Insn::new(LDX_H, 5, 2, 4, 0)); // destination bytes 4..6
        jump(&mut p, Insn::new(JNE32_K, 5, 0, 0, hi), Target::Next(i));
        jump(&mut p, Insn::new(JA, 0, 0, 0, 0), Target::Redirect);
    }
    if !macs.is_empty() {
        starts.push(p.len());
        jump(&mut p, Insn::new(JA, 0, 0, 0, 0), Target::Pass); // no MAC matched
    }
    let redirect = p.len();
    op(
        &mut p,
        Insn::new(LD_DW_IMM, 1, BPF_PSEUDO_MAP_FD, 0, map_fd),
    ); // r1 = &xskmap
    op(&mut p, Insn::new(0, 0, 0, 0, 0));
    op(&mut p, Insn::new(LDX_W, 2, 6, 16, 0)); // r2 = ctx->rx_queue_index
    op(&mut p, Insn::new(MOV64_K, 3, 0, 0, XDP_PASS)); // no socket there: pass
    op(&mut p, Insn::new(CALL, 0, 0, 0, BPF_FUNC_REDIRECT_MAP));
    op(&mut p, Insn::new(EXIT, 0, 0, 0, 0));
    let pass = p.len();
    op(&mut p, Insn::new(MOV64_K, 0, 0, 0, XDP_PASS));
    op(&mut p, Insn::new(EXIT, 0, 0, 0, 0));
    p.iter()
        .enumerate()
        .map(|(at, &(mut insn, target))| {
            if let Some(t) = target {
                let to = match t {
                    Target::Pass => pass,
                    Target::Redirect => redirect,
                    Target::Next(i) => starts[i + 1],
                };
                insn.off = (to as i64 - at as i64 - 1) as i16;
            }
            insn
        })
        .collect()
}

/// `union bpf_attr`, as bytes (144 on 6.x kernels; a kernel that knows fewer fields checks
/// that the rest is zero).
#[repr(C, align(8))]
struct Attr([u8; 144]);

impl Attr {
    fn new() -> Attr {
        Attr([0; 144])
    }
    fn u32(&mut self, at: usize, v: u32) -> &mut Attr {
        self.0[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(&mut self, at: usize, v: u64) -> &mut Attr {
        self.0[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn name(&mut self, at: usize, name: &str) -> &mut Attr {
        let n = name.len().min(15);
        self.0[at..at + n].copy_from_slice(&name.as_bytes()[..n]);
        self
    }
}

/// `bpf(cmd, attr)`: the descriptor it returns, or the error.
fn bpf(cmd: i32, attr: &mut Attr) -> io::Result<i32> {
    // SAFETY: `attr` is a live, 8-aligned buffer of the size passed; every pointer stored in
    // it (instructions, license, log, key, value) points at memory that outlives the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr.0.as_mut_ptr(),
            std::mem::size_of::<Attr>(),
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as i32)
    }
}

/// A descriptor `bpf` returned.
fn owned(fd: i32) -> OwnedFd {
    // SAFETY: `fd` was just returned by bpf(2) and nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// The error of a bpf(2) call `what`, with what a missing privilege or kernel feature means.
fn bpf_error(what: &str, e: io::Error) -> TransportError {
    let hint = match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => {
            ": loading an XDP program needs CAP_BPF and CAP_NET_ADMIN (run as root; \
             unprivileged BPF is off on most systems, kernel.unprivileged_bpf_disabled)"
        }
        Some(libc::ENOSYS) => ": this kernel has no bpf(2) (CONFIG_BPF_SYSCALL)",
        Some(libc::ENOMEM) => ": out of locked memory? (RLIMIT_MEMLOCK, `ulimit -l`)",
        _ => "",
    };
    TransportError::Setup {
        what: what.to_string(),
        error: format!("{e}{hint}"),
    }
}

/// How the program was attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attach {
    /// In the driver's receive path (XDP_FLAGS_DRV_MODE).
    Native,
    /// In the stack's generic receive path, on an skb (XDP_FLAGS_SKB_MODE).
    Generic,
}

/// Which attach modes to try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachMode {
    /// Native, else generic.
    Auto,
    Native,
    Generic,
}

/// The XSKMAP, the loaded program and its link on one interface; dropping it detaches the
/// program (the link's descriptor is closed first).
pub struct XdpFilter {
    link: Option<OwnedFd>,
    prog: OwnedFd,
    map: OwnedFd,
    attach: Attach,
}

impl XdpFilter {
    /// Creates the XSKMAP (`queues` entries) and puts `xsk_fd` (a bound AF_XDP socket) at
    /// `queue`, loads the filter for `ethertype` to `macs`, and attaches it to `ifindex`.
    pub fn attach(
        ifindex: u32,
        queue: u32,
        xsk_fd: RawFd,
        ethertype: u16,
        macs: &[Mac],
        mode: AttachMode,
    ) -> Result<XdpFilter, TransportError> {
        let mut a = Attr::new();
        a.u32(0, BPF_MAP_TYPE_XSKMAP)
            .u32(4, 4)
            .u32(8, 4)
            .u32(12, queue + 1)
            .name(28, "pipecast_xsks");
        let map = owned(bpf(BPF_MAP_CREATE, &mut a).map_err(|e| bpf_error("create an XSKMAP", e))?);
        let (key, value) = (queue, xsk_fd as u32);
        let mut a = Attr::new();
        a.u32(0, map.as_raw_fd() as u32)
            .u64(8, &key as *const u32 as u64)
            .u64(16, &value as *const u32 as u64);
        bpf(BPF_MAP_UPDATE_ELEM, &mut a)
            .map_err(|e| bpf_error("put the AF_XDP socket in the XSKMAP", e))?;
        let prog = load(&filter_program(ethertype, macs, map.as_raw_fd()))?;
        let modes: &[(Attach, u32)] = match mode {
            AttachMode::Auto => &[
                (Attach::Native, XDP_FLAGS_DRV_MODE),
                (Attach::Generic, XDP_FLAGS_SKB_MODE),
            ],
            AttachMode::Native => &[(Attach::Native, XDP_FLAGS_DRV_MODE)],
            AttachMode::Generic => &[(Attach::Generic, XDP_FLAGS_SKB_MODE)],
        };
        let mut last = None;
        for &(attach, flags) in modes {
            let mut a = Attr::new();
            a.u32(0, prog.as_raw_fd() as u32)
                .u32(4, ifindex)
                .u32(8, BPF_XDP)
                .u32(12, flags);
            match bpf(BPF_LINK_CREATE, &mut a) {
                Ok(fd) => {
                    return Ok(XdpFilter {
                        link: Some(owned(fd)),
                        prog,
                        map,
                        attach,
                    })
                }
                Err(e) => last = Some((attach, e)),
            }
        }
        let (attach, e) = last.expect("at least one mode");
        let busy = if e.raw_os_error() == Some(libc::EBUSY) {
            " (another XDP program is attached there: `ip link show`)"
        } else {
            ""
        };
        Err(bpf_error(
            &format!("attach the XDP program to interface {ifindex} ({attach:?} mode){busy}"),
            e,
        ))
    }

    /// How it was attached.
    pub fn mode(&self) -> Attach {
        self.attach
    }

    /// The loaded program's descriptor.
    pub fn prog_fd(&self) -> RawFd {
        self.prog.as_raw_fd()
    }

    /// The XSKMAP's descriptor.
    pub fn map_fd(&self) -> RawFd {
        self.map.as_raw_fd()
    }
}

impl Drop for XdpFilter {
    fn drop(&mut self) {
        // The link first: closing it detaches the program from the interface.
        self.link.take();
    }
}

/// Loads `insns` as an XDP program; on the verifier's refusal, its log is in the error.
fn load(insns: &[Insn]) -> Result<OwnedFd, TransportError> {
    let code: Vec<u8> = insns.iter().flat_map(|i| i.encode()).collect();
    let license = b"Dual MIT/GPL\0";
    let attempt = |log: &mut [u8]| {
        let mut a = Attr::new();
        a.u32(0, BPF_PROG_TYPE_XDP)
            .u32(4, insns.len() as u32)
            .u64(8, code.as_ptr() as u64)
            .u64(16, license.as_ptr() as u64)
            .u32(68, BPF_XDP)
            .name(48, "pipecast_xsk");
        if !log.is_empty() {
            a.u32(24, 1)
                .u32(28, log.len() as u32)
                .u64(32, log.as_mut_ptr() as u64);
        }
        bpf(BPF_PROG_LOAD, &mut a)
    };
    match attempt(&mut []) {
        Ok(fd) => Ok(owned(fd)),
        Err(e)
            if e.raw_os_error() == Some(libc::EINVAL) || e.raw_os_error() == Some(libc::EACCES) =>
        {
            // Again with the verifier's log, to say why.
            let mut log = vec![0u8; 64 << 10];
            let again = attempt(&mut log);
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let text = String::from_utf8_lossy(&log[..end]);
            let tail: String = text.lines().rev().take(6).collect::<Vec<_>>().join(" | ");
            match again {
                Ok(fd) => Ok(owned(fd)),
                Err(_) => Err(bpf_error(
                    &format!("load the XDP filter (verifier: {tail})"),
                    e,
                )),
            }
        }
        Err(e) => Err(bpf_error("load the XDP filter", e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Follows the program for a frame as the kernel would, far enough to say where it goes:
    /// `Some(true)` redirected, `Some(false)` passed.
    fn run(p: &[Insn], frame: &[u8]) -> Option<bool> {
        let mut r = [0u64; 11];
        let mut pc = 0usize;
        // Addresses: data at 0x1000, data_end after the frame.
        let (data, end) = (0x1000u64, 0x1000 + frame.len() as u64);
        let load = |addr: u64, n: usize| -> u64 {
            let at = (addr - data) as usize;
            let mut v = [0u8; 8];
            v[..n].copy_from_slice(&frame[at..at + n]);
            u64::from_le_bytes(v)
        };
        for _ in 0..100 {
            let i = p[pc];
            let (d, s) = (i.dst as usize, i.src as usize);
            pc += 1;
            match i.code {
                MOV64_X => r[d] = r[s],
                MOV64_K => r[d] = i.imm as i64 as u64,
                ADD64_K => r[d] = r[d].wrapping_add(i.imm as i64 as u64),
                LDX_W if s == 6 => {
                    r[d] = match i.off {
                        0 => data,
                        4 => end,
                        16 => 0,
                        _ => panic!("ctx offset {}", i.off),
                    }
                }
                LDX_W => r[d] = load(r[s] + i.off as u64, 4),
                LDX_H => r[d] = load(r[s] + i.off as u64, 2),
                LD_DW_IMM => {
                    assert_eq!(i.src, BPF_PSEUDO_MAP_FD);
                    pc += 1;
                }
                JGT_X => {
                    if r[d] > r[s] {
                        pc = (pc as i64 + i.off as i64) as usize
                    }
                }
                JNE32_K => {
                    if r[d] as u32 != i.imm as u32 {
                        pc = (pc as i64 + i.off as i64) as usize
                    }
                }
                JA => pc = (pc as i64 + i.off as i64) as usize,
                CALL => {
                    assert_eq!(i.imm, BPF_FUNC_REDIRECT_MAP);
                    assert_eq!(r[3], XDP_PASS as u64);
                    return Some(true);
                }
                EXIT => {
                    assert_eq!(r[0], XDP_PASS as u64);
                    return Some(false);
                }
                c => panic!("opcode {c:#x}"),
            }
        }
        None
    }

    fn frame(dst: Mac, ethertype: u16, len: usize) -> Vec<u8> {
        let mut f = vec![0u8; len.max(14)];
        f[..6].copy_from_slice(&dst);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 9]);
        f[12..14].copy_from_slice(&ethertype.to_be_bytes());
        f.truncate(len);
        f
    }

    #[test]
    fn the_filter_redirects_the_carriers_frames_to_its_macs_and_passes_the_rest() {
        let group = [0x03, 0x50, 0xde, 0xad, 0xbe, 0xef];
        let own = [0x02, 0x11, 0x22, 0x33, 0x44, 0x55];
        let p = filter_program(0x88B6, &[group, own], 7);
        assert_eq!(run(&p, &frame(group, 0x88B6, 60)), Some(true));
        assert_eq!(run(&p, &frame(own, 0x88B6, 14)), Some(true));
        assert_eq!(run(&p, &frame(group, 0x88B5, 60)), Some(false));
        assert_eq!(run(&p, &frame(group, 0x0800, 60)), Some(false));
        let mut other = group;
        other[5] ^= 1;
        assert_eq!(run(&p, &frame(other, 0x88B6, 60)), Some(false));
        other = own;
        other[0] ^= 0x80;
        assert_eq!(run(&p, &frame(other, 0x88B6, 60)), Some(false));
        // Shorter than an Ethernet header: passed unread.
        assert_eq!(run(&p, &frame(group, 0x88B6, 13)), Some(false));
        // No MACs: every frame of the EtherType.
        let any = filter_program(0x88B6, &[], 7);
        assert_eq!(run(&any, &frame(other, 0x88B6, 60)), Some(true));
        assert_eq!(run(&any, &frame(other, 0x88B5, 60)), Some(false));
    }

    #[test]
    fn instructions_encode_as_the_kernel_reads_them() {
        // r1 = map fd 7 (pseudo), as `llvm-objdump -d` shows `18 11 00 00 07 00 00 00`.
        let p = filter_program(0x88B6, &[], 7);
        let ld = p.iter().position(|i| i.code == LD_DW_IMM).unwrap();
        assert_eq!(p[ld].encode(), [0x18, 0x11, 0, 0, 7, 0, 0, 0]);
        assert_eq!(p[ld + 1].encode(), [0; 8]);
        // if w5 != 0xb688 goto +off: `56 05 off off 88 b6 00 00`.
        let jne = p.iter().position(|i| i.code == JNE32_K).unwrap();
        let e = p[jne].encode();
        assert_eq!((e[0], e[1], &e[4..]), (0x56, 0x05, &[0x88, 0xb6, 0, 0][..]));
        // Every jump lands inside the program.
        for (at, i) in p.iter().enumerate() {
            if [JGT_X, JNE32_K, JA].contains(&i.code) {
                let to = at as i64 + 1 + i.off as i64;
                assert!(to > at as i64 && (to as usize) < p.len(), "{at}: {i:?}");
            }
        }
        assert_eq!(p.last().unwrap().code, EXIT);
    }
}
