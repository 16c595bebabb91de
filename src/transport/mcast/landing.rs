//! A data frame's payload landed and checksummed in one step ([`copy_crc32c`]): copied from
//! where the frame arrived (a PACKET_MMAP ring's slot, written by the kernel on another CPU:
//! cold) to its place in the broadcast's buffer, then its CRC32C computed over the copy,
//! which is still in the L1 cache (a segment is at most ~9 KB). Checking the CRC first and
//! copying after read the cold ring twice: the check took the cache misses and the copy
//! the rest (docs/multicast.md, "Receivers' CPU: frames landed from the ring in place": the
//! CRC 26 % and the copy 38 % of a receiving rank at MTU 9000). Measured on this host over
//! 16 MiB of 8908-byte segments from 16 KiB slots flushed from the caches: CRC then copy
//! 4.0-4.3 ms, copy then CRC of the copy 2.8-2.9 ms, a single SSE4.2 pass that loads each
//! 8 bytes once, feeds them to `crc32` in three streams and stores them 2.7-3.0 ms (no
//! better: not kept), a memcpy 1.8-2.0 ms ("Receivers' CPU: ... (helper cpu32)").
//!
//! The CRC is known only once the bytes are in place: [`Unsummed`](super::Unsummed) says
//! where that is allowed (a segment not landed yet, which a good copy overwrites before it
//! counts as landed).

use super::{accept_with, admit, Dropped, Source};
use crate::wire::mcast::{Data, Frame, Header, DATA_HEADER_LEN};

/// What [`accept_unsummed`] took.
#[derive(Debug)]
pub enum Accepted<'a> {
    /// Checked whole, as [`accept_with`] checks a frame: its header and payload.
    Checked(Header, &'a [u8]),
    /// A data frame checked in everything but the CRC over its payload.
    Unsummed(Unsummed<'a>),
}

/// A data frame whose lengths, version, kind, cookie tag and source were checked, but not
/// yet its CRC, which covers its payload: [`Unsummed::land`] copies the payload and checks
/// the CRC on the way, [`Unsummed::verify`] checks it without a copy.
#[derive(Debug)]
pub struct Unsummed<'a> {
    data: Data,
    payload: &'a [u8],
    /// The CRC32C of the header's covered bytes, and the checksum the frame carries.
    partial: u32,
    sum: u32,
}

impl<'a> Unsummed<'a> {
    /// Its header, trusted only as far as it was checked: its fields may still be wrong where
    /// the CRC fails (so it may only choose a place the copy may go wrong in, never what
    /// counts as landed).
    pub fn header(&self) -> &Data {
        &self.data
    }

    pub fn payload_len(&self) -> usize {
        self.payload.len()
    }

    /// Copies the payload into `dst` and checks the CRC over header and payload on the way:
    /// `Ok` when it matches (`dst` holds the payload), `Err(Checksum)` when not or when `dst`
    /// is not the payload's length. After a failed check `dst` holds bytes that nothing
    /// vouches for: only a place that counts as empty until a good copy is there may be
    /// given (a segment not landed yet).
    pub fn land(self, dst: &mut [u8]) -> Result<(), Dropped> {
        match copy_crc32c(self.partial, self.payload, dst) {
            Some(crc) if crc == self.sum => Ok(()),
            _ => Err(Dropped::Checksum),
        }
    }

    /// Checks the CRC without a copy: its header and payload, as [`accept_with`] gives them.
    pub fn verify(self) -> Result<(Header, &'a [u8]), Dropped> {
        if crc32c::crc32c_append(self.partial, self.payload) == self.sum {
            Ok((Header::Data(self.data), self.payload))
        } else {
            Err(Dropped::Checksum)
        }
    }
}

/// [`accept_with`], but a data frame whose CRC covers its payload (where the carrier does
/// not checksum: raw Ethernet) comes back [`Accepted::Unsummed`] once everything else of it
/// passed (lengths, version and kind, the job's tag, the source of the rank it names), so
/// that its payload's CRC is computed in the landing copy. A frame that fails a check is
/// checked whole first, so it is dropped for what [`accept_with`] says (a corrupt frame as
/// `Checksum`, not as the stranger its bytes seem to name).
pub fn accept_unsummed<'a>(
    bytes: &'a [u8],
    source: &Source,
    me: usize,
    cookie: u64,
    is_rank: &dyn Fn(usize, &Source) -> bool,
    carrier_sums: bool,
) -> Result<Accepted<'a>, Dropped> {
    let whole = || {
        accept_with(bytes, source, me, cookie, is_rank, carrier_sums)
            .map(|(h, p)| Accepted::Checked(h, p))
    };
    let frame = Frame::new_checked(bytes).map_err(|_| Dropped::Malformed)?;
    let sums = if carrier_sums {
        None
    } else {
        frame.payload_sum()
    };
    let (Some((partial, sum)), Some(data)) = (sums, Data::parse(&frame)) else {
        return whole();
    };
    if admit(&Header::Data(data), source, me, cookie, is_rank).is_err() {
        return whole();
    }
    // Within `bytes`: `new_checked` saw the whole payload there.
    let payload = &bytes[DATA_HEADER_LEN..DATA_HEADER_LEN + usize::from(data.count)];
    Ok(Accepted::Unsummed(Unsummed {
        data,
        payload,
        partial,
        sum,
    }))
}

/// Copies `src` into `dst` and returns the CRC32C of what it copied, appended to `crc`
/// (`crc32c::crc32c_append(crc, src)`); `None`, copying nothing, when their lengths differ.
pub fn copy_crc32c(crc: u32, src: &[u8], dst: &mut [u8]) -> Option<u32> {
    if src.len() != dst.len() {
        return None;
    }
    dst.copy_from_slice(src);
    Some(crc32c::crc32c_append(crc, dst))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_copy_holds_the_bytes_and_its_crc_is_the_crates() {
        let src: Vec<u8> = (0..20_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        // Lengths around the steps (3 blocks, 8 bytes), odd, and offsets off alignment.
        for len in [
            0, 1, 7, 8, 9, 255, 767, 768, 769, 1440, 1468, 1537, 8908, 8999, 19_990,
        ] {
            for off in [0, 1, 3] {
                let s = &src[off..off + len];
                let mut dst = vec![0xAAu8; len + 2];
                let crc = copy_crc32c(0x1234_5678, s, &mut dst[1..=len]).unwrap();
                assert_eq!(crc, crc32c::crc32c_append(0x1234_5678, s), "{len} {off}");
                assert_eq!(&dst[1..=len], s, "{len} {off}");
                assert_eq!((dst[0], dst[len + 1]), (0xAA, 0xAA), "{len} {off}");
            }
        }
    }

    fn frame(flags: u16, payload: &[u8]) -> Vec<u8> {
        use crate::wire::mcast::cookie_tag;
        let data = Data {
            flags,
            from: 1,
            tag: cookie_tag(77),
            bseq: 5,
            index: 3,
            count: payload.len() as u16,
            check: 9,
        };
        let h = Header::Data(data).to_bytes(payload).unwrap();
        [&h[..], payload].concat()
    }

    #[test]
    fn a_data_frame_is_checked_but_for_its_payloads_crc_which_the_landing_checks() {
        let source = Source::Mac([2, 0, 0, 0, 0, 1]);
        let is_rank = |r: usize, s: &Source| r == 1 && *s == Source::Mac([2, 0, 0, 0, 0, 1]);
        for len in [0usize, 1, 7, 1000, 8908] {
            let payload = pattern(len);
            let good = frame(0, &payload);
            // Good: lands, and verifies.
            let Ok(Accepted::Unsummed(u)) = accept_unsummed(&good, &source, 0, 77, &is_rank, false)
            else {
                panic!("{len}: not unsummed");
            };
            assert_eq!((u.header().index, u.payload_len()), (3, len));
            let mut dst = vec![0u8; len];
            assert_eq!(u.land(&mut dst), Ok(()));
            assert_eq!(dst, payload);
            let Ok(Accepted::Unsummed(u)) = accept_unsummed(&good, &source, 0, 77, &is_rank, false)
            else {
                panic!("{len}: not unsummed");
            };
            let (h, p) = u.verify().unwrap();
            assert_eq!((h.bseq(), p), (5, &payload[..]));
            // A wrong-length place takes nothing.
            let Ok(Accepted::Unsummed(u)) = accept_unsummed(&good, &source, 0, 77, &is_rank, false)
            else {
                panic!("{len}: not unsummed");
            };
            let mut short = vec![0xAA; len + 1];
            assert_eq!(u.land(&mut short), Err(Dropped::Checksum));
            assert!(short.iter().all(|&b| b == 0xAA));
            // A payload bit flipped: both fail.
            if len > 0 {
                let mut bad = good.clone();
                bad[DATA_HEADER_LEN + len / 2] ^= 4;
                let take = || match accept_unsummed(&bad, &source, 0, 77, &is_rank, false) {
                    Ok(Accepted::Unsummed(u)) => u,
                    other => panic!("{len}: {other:?}"),
                };
                let mut dst = vec![0u8; len];
                assert_eq!(take().land(&mut dst), Err(Dropped::Checksum));
                assert_eq!(take().verify().unwrap_err(), Dropped::Checksum);
            }
            // A header bit flipped (the index): checked once the bytes are in; a flipped
            // tag or source is checked whole first, and is a checksum failure.
            let mut bad = good.clone();
            bad[20] ^= 1;
            let Ok(Accepted::Unsummed(u)) = accept_unsummed(&bad, &source, 0, 77, &is_rank, false)
            else {
                panic!("{len}: not unsummed");
            };
            assert_eq!(u.land(&mut vec![0u8; len]), Err(Dropped::Checksum));
            let mut bad = good.clone();
            bad[8] ^= 1;
            assert_eq!(
                accept_unsummed(&bad, &source, 0, 77, &is_rank, false).unwrap_err(),
                Dropped::Checksum
            );
            // Another job's good frame, a stranger's: what `accept_with` says.
            assert_eq!(
                accept_unsummed(&good, &source, 0, 78, &is_rank, false).unwrap_err(),
                Dropped::Foreign
            );
            let stranger = Source::Mac([2, 0, 0, 0, 0, 9]);
            assert_eq!(
                accept_unsummed(&good, &stranger, 0, 77, &is_rank, false).unwrap_err(),
                Dropped::Spoofed
            );
            // Where the carrier checksums: checked whole.
            assert!(matches!(
                accept_unsummed(&good, &source, 0, 77, &is_rank, true),
                Ok(Accepted::Checked(..))
            ));
            // A header-only sum where the carrier does not checksum: dropped as before.
            let header_only = frame(crate::wire::mcast::flags::HEADER_SUM, &payload);
            assert_eq!(
                accept_unsummed(&header_only, &source, 0, 77, &is_rank, false).unwrap_err(),
                Dropped::Checksum
            );
        }
        assert_eq!(
            accept_unsummed(&[2u8], &source, 0, 77, &is_rank, false).unwrap_err(),
            Dropped::Malformed
        );
    }

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    #[test]
    fn unequal_lengths_copy_nothing() {
        let mut dst = [7u8; 4];
        assert_eq!(copy_crc32c(0, &[1, 2, 3], &mut dst), None);
        assert_eq!(dst, [7; 4]);
    }
}
