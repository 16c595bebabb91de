//! What a rank may receive next: the segments its parents may send now under the window.
//!
//! A link that must prepare before bytes arrive asks for them: an RDMA verbs link (issue 17)
//! pre-posts a receive, or exposes the byte range of the user buffer to a one-sided write,
//! for each [`Expected`] segment, and posts more as the set moves on. The set follows the
//! engine's flow control (seed 000 §3.1's pipeline under a window of R segments per child):
//! it shrinks as segments land and moves forward as this rank sends credits, so it never
//! holds more than R segments per lane and broadcast. Links that receive into whatever
//! arrives (TCP, shared memory, raw Ethernet) need not ask.

use std::ops::Range;

/// A segment this rank may receive next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    /// The parent that sends it.
    pub from: usize,
    /// Its broadcast.
    pub seq: u64,
    pub lane: u16,
    /// Segment number within the lane.
    pub index: u32,
    /// Where it lands in that broadcast's buffer.
    pub range: Range<usize>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Bcast, Config, DataHeader, Endpoint, Message};
    use crate::plan::{self, TreeKind};
    use crate::topology::Topology;

    /// Rank `me` on the chain 0 → 1 → 2: 40 bytes in 4-byte segments (10 of them), window 3,
    /// a credit every 2 segments.
    fn bcast(me: usize, seq: u64) -> Bcast {
        let lanes = plan::build(&Topology::single_switch(3), 0, &TreeKind::NaiveLinear, None)
            .unwrap()
            .lanes;
        let setup = crate::engine::Setup {
            seq,
            root: 0,
            msize: 40,
            segment: 4,
            deep: false,
        };
        let config = Config {
            window: 3,
            credit_every: 2,
            ..Config::default()
        };
        Bcast::new(me, &lanes, setup, config, 0).unwrap()
    }

    fn land(b: &mut Bcast, index: u32) {
        let h = DataHeader {
            seq: b.setup().seq,
            root: 0,
            msize: 40,
            segment: 4,
            lanes: 1,
            lane: 0,
            index,
            len: 4,
        };
        assert!(matches!(
            b.place(0, &h),
            Ok(crate::engine::Placement::Into(_))
        ));
        b.handle_data(0, &h);
    }

    fn indices(b: &Bcast) -> Vec<u32> {
        b.expected().iter().map(|e| e.index).collect()
    }

    #[test]
    fn it_shrinks_as_segments_land_and_moves_as_credits_go_out() {
        let mut b = bcast(1, 7);
        assert_eq!(
            b.expected(),
            (0..3)
                .map(|i| Expected {
                    from: 0,
                    seq: 7,
                    lane: 0,
                    index: i,
                    range: 4 * i as usize..4 * i as usize + 4,
                })
                .collect::<Vec<_>>()
        );
        land(&mut b, 1);
        assert_eq!(indices(&b), [0, 2], "no credit yet: the window stays");
        land(&mut b, 0);
        // Two in a row: a credit for 2 is queued, and the parent may send up to 2 + 3.
        let credit = b.poll_transmit(0).unwrap();
        assert_eq!(
            credit.message,
            Message::Credit {
                seq: 7,
                lane: 0,
                consumed: 2
            }
        );
        assert_eq!(indices(&b), [2, 3, 4]);
        for i in 2..9 {
            land(&mut b, i);
        }
        assert_eq!(indices(&b), [9], "the window ends at the last segment");
        land(&mut b, 9);
        assert!(b.expected().is_empty(), "everything arrived");
    }

    #[test]
    fn the_root_expects_nothing_and_the_endpoint_lists_every_broadcast_by_sender() {
        assert!(bcast(0, 1).expected().is_empty());
        let mut ep = Endpoint::new();
        let mut bufs = [[0u8; 40]; 2];
        for (seq, buf) in (1..=2).zip(bufs.iter_mut()) {
            ep.post(bcast(2, seq), buf, 0).unwrap();
        }
        let all = ep.expected(&|_| true);
        assert_eq!(all.len(), 6);
        assert!(all.iter().all(|e| e.from == 1));
        assert_eq!(
            all.iter().map(|e| e.seq).collect::<Vec<_>>(),
            [1, 1, 1, 2, 2, 2],
            "oldest broadcast first"
        );
        assert!(ep.expected(&|p| p != 1).is_empty(), "another link's peer");
        ep.finish(1);
        assert_eq!(ep.expected(&|_| true).len(), 3);
    }
}
