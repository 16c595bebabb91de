//! How a message is cut: lanes get equal contiguous shares, each share is cut into segments.
//!
//! Seed 000 §3.1: a pipelined broadcast splits the message into segments of a chosen size; the
//! last one is shorter. Seed 002 §3.1 splits the message across lanes (one share per tree); the
//! scatter + allgather baseline uses one lane per non-root rank.

use super::DataHeader;
use std::ops::Range;

/// The cut of one message: `lanes[l]` is the byte range of lane l; segments are `segment`
/// bytes (the last of a lane shorter). A lane with an empty share still carries one empty
/// segment, so that a zero-byte broadcast still synchronizes the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    msize: u64,
    segment: u64,
    lanes: Vec<Range<u64>>,
}

impl Layout {
    /// Cuts `msize` bytes into `lanes` equal shares (the first `msize % lanes` get one more
    /// byte) and each share into `segment`-byte segments. `segment` 0 is taken as 1.
    pub fn new(msize: u64, segment: u64, lanes: usize) -> Layout {
        let lanes = lanes.max(1) as u64;
        let (base, extra) = (msize / lanes, msize % lanes);
        let mut start = 0;
        let ranges = (0..lanes)
            .map(|l| {
                let len = base + u64::from(l < extra);
                let r = start..start + len;
                start += len;
                r
            })
            .collect();
        Layout {
            msize,
            segment: segment.max(1),
            lanes: ranges,
        }
    }

    pub fn msize(&self) -> u64 {
        self.msize
    }
    pub fn segment(&self) -> u64 {
        self.segment
    }
    pub fn lanes(&self) -> usize {
        self.lanes.len()
    }

    /// Number of segments of lane `l` (at least 1).
    pub fn segments(&self, l: usize) -> u32 {
        let len = self.lanes[l].end - self.lanes[l].start;
        len.div_ceil(self.segment).max(1) as u32
    }

    /// The byte range of segment `i` of lane `l` in the message, or `None` if there is none.
    pub fn range(&self, l: usize, i: u32) -> Option<Range<u64>> {
        let lane = self.lanes.get(l)?;
        if i >= self.segments(l) {
            return None;
        }
        let start = lane.start + u64::from(i) * self.segment;
        let end = (start + self.segment).min(lane.end);
        Some(start..end.max(start))
    }

    /// The number of segment `i` of lane `l` when the lanes' segments are numbered one lane
    /// after another (how a link names a segment in fewer bits than lane and index: RDMA
    /// verbs' immediate).
    pub fn number(&self, l: usize, i: u32) -> u64 {
        (0..l.min(self.lanes()))
            .map(|l| u64::from(self.segments(l)))
            .sum::<u64>()
            + u64::from(i)
    }

    /// The lane and index of segment number `n` ([`number`](Self::number)), or `None` if
    /// there is none.
    pub fn locate(&self, mut n: u64) -> Option<(usize, u32)> {
        for l in 0..self.lanes() {
            let k = u64::from(self.segments(l));
            if n < k {
                return Some((l, n as u32));
            }
            n -= k;
        }
        None
    }

    /// The header of segment `i` of lane `l` of broadcast `seq` from `root`, or `None` if
    /// there is none.
    pub fn header(&self, seq: u64, root: u32, l: usize, i: u32) -> Option<DataHeader> {
        let range = self.range(l, i)?;
        Some(DataHeader {
            seq,
            root,
            msize: self.msize,
            segment: self.segment as u32,
            lanes: self.lanes() as u16,
            lane: l as u16,
            index: i,
            len: (range.end - range.start) as u32,
        })
    }
}

/// The length of segment `i` of lane `l` when `msize` bytes are cut into `lanes` shares of
/// `segment`-byte segments (what [`Layout::range`] gives, without building the layout), or
/// `None` if there is no such segment: how a segment of a broadcast not posted here (no
/// layout yet) is checked against the shape its header announces.
pub fn segment_len(msize: u64, segment: u64, lanes: usize, l: usize, i: u32) -> Option<u64> {
    let (lanes, l) = (lanes.max(1) as u64, l as u64);
    if l >= lanes {
        return None;
    }
    let share = msize / lanes + u64::from(l < msize % lanes);
    let segment = segment.max(1);
    if u64::from(i) >= share.div_ceil(segment).max(1) {
        return None;
    }
    Some((share - u64::from(i) * segment).min(segment))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_len_is_the_layouts_segment_without_the_layout() {
        for (msize, seg, lanes) in [(0, 8, 1), (1, 8, 1), (17, 8, 1), (16, 8, 2), (37, 4, 3)] {
            let layout = Layout::new(msize, seg, lanes);
            for l in 0..lanes + 1 {
                for i in 0..8 {
                    let want = (l < lanes)
                        .then(|| layout.range(l, i))
                        .flatten()
                        .map(|r| r.end - r.start);
                    assert_eq!(
                        segment_len(msize, seg, lanes, l, i),
                        want,
                        "{msize} {seg} {lanes} {l} {i}"
                    );
                }
            }
        }
        assert_eq!(
            segment_len(1 << 60, 1 << 20, 65535, 65534, 3),
            Some(1 << 20)
        );
    }

    #[test]
    fn segments_tile_the_message() {
        for (msize, seg, lanes) in [
            (0, 8, 1),
            (1, 8, 1),
            (17, 8, 1),
            (16, 8, 2),
            (23, 4, 3),
            (5, 8, 7),
        ] {
            let layout = Layout::new(msize, seg, lanes);
            let mut next = 0;
            for l in 0..layout.lanes() {
                for i in 0..layout.segments(l) {
                    let r = layout.range(l, i).unwrap();
                    assert_eq!(r.start, next, "{msize} {seg} {lanes}");
                    assert!(r.end - r.start <= seg);
                    next = r.end;
                }
                assert!(layout.range(l, layout.segments(l)).is_none());
            }
            assert_eq!(next, msize);
            let total: u64 = (0..layout.lanes())
                .map(|l| u64::from(layout.segments(l)))
                .sum();
            for n in 0..total {
                let (l, i) = layout.locate(n).unwrap();
                assert_eq!(layout.number(l, i), n);
            }
            assert_eq!(layout.locate(total), None);
        }
    }
}
