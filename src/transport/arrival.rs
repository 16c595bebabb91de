//! [`Dest`]: where an arriving segment's payload goes while a link reads it, the receive path
//! every link shares. The driver decides ([`Driver::header`]) when the segment's header is
//! there; the link reads the payload straight into the broadcast's buffer ([`slot`]), into
//! memory of its own for a broadcast not posted yet, or nowhere; once it is all there,
//! [`Dest::landed`] tells the driver.
//!
//! [`slot`]: super::slot

use super::driver::{Driver, Landing};
use super::{limits, Buffers, TransportError};
use crate::engine::{DataHeader, Message};
use std::ops::Range;
use std::sync::OnceLock;

/// Where an arriving segment's payload goes.
#[derive(Debug)]
pub(crate) enum Dest {
    /// Straight into broadcast `seq`'s buffer at `range` (the segment's length).
    Buffer { seq: u64, range: Range<usize> },
    /// Into memory of its own, for a broadcast this rank has not posted yet.
    Hold(Vec<u8>),
    /// Read and dropped (a duplicate, a segment of a finished broadcast).
    Discard,
}

impl Dest {
    /// Asks `driver` where segment `h` from `from` goes. A segment to hold gets `hold` zeroed
    /// bytes to read into (at most a segment: the driver checked the length; a link that
    /// assembles it piece by piece may start with none and grow it): see [`held`].
    pub(crate) fn of(
        driver: &mut dyn Driver,
        from: usize,
        h: &DataHeader,
        hold: usize,
    ) -> crate::Result<Dest> {
        Ok(match driver.header(from, h)? {
            Landing::Into { seq, range } => Dest::Buffer { seq, range },
            Landing::Hold => Dest::Hold(held(from, h, hold)?),
            Landing::Discard => Dest::Discard,
        })
    }

    /// Segment `message` from `from` is all there: tells the driver (a held one lands in its
    /// broadcast's buffer in `bufs` if that was posted meanwhile, else is kept).
    pub(crate) fn landed(
        self,
        driver: &mut dyn Driver,
        bufs: &mut Buffers,
        now: u64,
        from: usize,
        message: Message,
    ) -> crate::Result<()> {
        match self {
            Dest::Buffer { .. } => driver.landed(now, from, &message),
            Dest::Hold(payload) => driver.held(bufs, now, from, message, payload),
            Dest::Discard => Ok(()),
        }
    }
}

/// Memory for `hold` bytes of segment `h` from `from`, kept until its broadcast is posted
/// here. Its lengths come from the peer, so they are bounded before anything is allocated
/// ([`limits::announced`]: a peer announcing a 2^60-byte message gets that error, not an
/// abort), and an allocation the allocator refuses is the named memory error
/// ([`limits::heap`]) instead of an abort. Either fails the broadcasts that need the link.
fn held(from: usize, h: &DataHeader, hold: usize) -> Result<Vec<u8>, TransportError> {
    static CEILING: OnceLock<u64> = OnceLock::new();
    let what = || {
        format!(
            "hold segment {} of broadcast {} from rank {from} until it is posted here",
            h.index, h.seq
        )
    };
    if hold as u64 > u64::from(h.len) {
        return Err(limits::heap(&what(), hold as u64));
    }
    limits::announced(from, h, *CEILING.get_or_init(limits::memory_ceiling)).map_err(|error| {
        TransportError::Memory {
            what: what(),
            error,
        }
    })?;
    limits::buffer(what, hold)
}
