//! Copying a large segment out of a staging ring with non-temporal ("streaming") stores: the
//! destination is written straight to memory instead of being read into the cache first and
//! evicted later. A plain `memcpy` of a message larger than the caches moves each byte three
//! times through the memory bus (read the source, read the destination line it is about to
//! overwrite, write it back); a streaming copy out of a ring the cache still holds moves it
//! once. With 8 ranks on 2 cores the readers' copies out of the ring are 7 of the fan-out's 8
//! copies, so this is most of what a large broadcast costs: measured on this host (one
//! thread, 1 writer copy in + 7 copies out of an 8 MiB ring, 64 MiB message) 8.5 memcpys of
//! time with plain stores, 4.8 with streaming ones (docs/shm.md).
//!
//! The destination then is not in the cache, which costs a reader nothing it would have had:
//! a message this large does not stay in the cache anyway ([`STREAM_FROM`]). glibc's `memcpy`
//! switches to the same stores only above 3/4 of the shared cache per thread (192 MiB here),
//! which a broadcast's 1 MiB chunks never reach.

/// From which message size (bytes, the reader's buffer) a ring chunk is copied out with
/// streaming stores: the host's 8 destinations of a 4 MiB message already fill a 32 MiB
/// last-level cache.
pub const STREAM_FROM: usize = 4 << 20;

/// Copies `dst.len()` bytes from `src` into `dst`, with streaming stores where the CPU has
/// them (x86-64: SSE2 `movntdq`, part of the baseline), else a plain copy ([`copy_plain`]);
/// every store is visible to other CPUs when it returns.
///
/// # Safety
/// `src` must be valid for reads of `dst.len()` bytes, and those bytes must not overlap `dst`.
/// Another process may write them concurrently (a misbehaving peer's ring): that garbles the
/// copy only, as no reference to them is formed.
pub unsafe fn copy(src: *const u8, dst: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller's contract, passed on unchanged.
    unsafe {
        copy_streaming(src, dst)
    };
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: the caller's contract, passed on unchanged.
    unsafe {
        copy_plain(src, dst)
    };
}

/// Copies `dst.len()` bytes from `src` into `dst` with ordinary stores (`memcpy`): what
/// [`copy`] does on CPUs without streaming stores, and for its unaligned head and tail.
///
/// # Safety
/// As for [`copy`].
pub unsafe fn copy_plain(src: *const u8, dst: &mut [u8]) {
    // SAFETY: `src` is valid for `dst.len()` bytes that do not overlap `dst` (the caller's
    // contract); `dst` is a live exclusive slice.
    unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
}

/// [`copy`] on x86-64: plain stores up to the first 16-byte boundary of the destination
/// (`movntdq` needs it), whole 64-byte blocks streamed, plain stores for the tail, then a
/// store fence.
///
/// # Safety
/// As for [`copy`].
#[cfg(target_arch = "x86_64")]
unsafe fn copy_streaming(src: *const u8, dst: &mut [u8]) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
    let n = dst.len();
    let head = dst.as_ptr().align_offset(16).min(n);
    // SAFETY: the first `head <= n` bytes of both ranges (the caller's contract).
    unsafe { copy_plain(src, &mut dst[..head]) };
    let d = dst.as_mut_ptr();
    let mut i = head;
    while i + 64 <= n {
        // SAFETY: `i + 64 <= n`: four unaligned 16-byte loads inside the source range and
        // four stores inside `dst`, at `d + i`, which is 16-byte aligned (`head` made it so,
        // and `i` advances by 64); SSE2 is part of every x86-64 CPU (the target's baseline).
        unsafe {
            let s = src.add(i).cast::<__m128i>();
            let t = d.add(i).cast::<__m128i>();
            let a = _mm_loadu_si128(s);
            let b = _mm_loadu_si128(s.add(1));
            let c = _mm_loadu_si128(s.add(2));
            let e = _mm_loadu_si128(s.add(3));
            _mm_stream_si128(t, a);
            _mm_stream_si128(t.add(1), b);
            _mm_stream_si128(t.add(2), c);
            _mm_stream_si128(t.add(3), e);
        }
        i += 64;
    }
    // SAFETY: the last `n - i` bytes of both ranges (`i <= n`).
    unsafe { copy_plain(src.add(i), &mut dst[i..]) };
    // Streaming stores are weakly ordered: fence them before whatever tells another thread
    // that the bytes are there.
    _mm_sfence();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`copy`] or [`copy_plain`].
    type CopyFn = unsafe fn(*const u8, &mut [u8]);

    /// Every length from 0 to 300 (the head, 0–4 streamed blocks, the tail) and some long
    /// ones, from every source and destination address modulo 16 (what decides the head and
    /// the loads' alignment), through both copies; not a byte around `dst` is touched.
    #[test]
    fn copies_every_length_and_alignment_exactly() {
        let src = crate::testing::pattern(8192, 0);
        let lens = (0..=300).chain([511, 512, 513, 1000, 4096, 4099, 8000]);
        let (mut src_mods, mut dst_mods) = (0u32, 0u32);
        for len in lens {
            let mut dst = vec![0u8; len + 32];
            for src_at in 0..16 {
                for dst_at in 0..16 {
                    src_mods |= 1 << (src[src_at..].as_ptr() as usize % 16);
                    dst_mods |= 1 << (dst[dst_at..].as_ptr() as usize % 16);
                    let copies: [(&str, CopyFn); 2] = [("copy", copy), ("plain", copy_plain)];
                    for (name, f) in copies {
                        dst.fill(0xee);
                        // SAFETY: `src_at + len <= 8192` bytes of `src`; `dst` is another
                        // vector.
                        unsafe { f(src[src_at..].as_ptr(), &mut dst[dst_at..dst_at + len]) };
                        let at = format!("{name}: {len} bytes from +{src_at} to +{dst_at}");
                        assert_eq!(
                            &dst[dst_at..dst_at + len],
                            &src[src_at..src_at + len],
                            "{at}"
                        );
                        assert!(dst[..dst_at].iter().all(|&b| b == 0xee), "{at}");
                        assert!(dst[dst_at + len..].iter().all(|&b| b == 0xee), "{at}");
                    }
                }
            }
        }
        assert_eq!(
            (src_mods, dst_mods),
            (0xffff, 0xffff),
            "every address modulo 16"
        );
    }
}
