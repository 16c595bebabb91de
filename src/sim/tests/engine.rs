//! One rank's broadcast by hand, no network: the window, agreement checks, and garbage in.

use super::config;
use crate::engine::{Bcast, DataHeader, EngineError, Message, Placement, Setup, Transmit};
use crate::plan::{self, TreeKind};
use crate::topology::Topology;

#[test]
fn window_bounds_segments_in_flight() {
    let topo = Topology::single_switch(2);
    let plan = plan::build(&topo, 0, &TreeKind::Linear, None).unwrap();
    let setup = Setup {
        seq: 0,
        root: 0,
        msize: 100,
        segment: 10,
        deep: false,
    };
    let mut root = Bcast::new(0, &plan.lanes, setup, config(), 0).unwrap();
    let mut sent = 0;
    while root.poll_transmit(0).is_some() {
        sent += 1;
    }
    assert_eq!(sent, config().window);
    let credit = Message::Credit {
        seq: 0,
        lane: 0,
        consumed: 2,
    };
    root.handle_message(1, 1, &credit).unwrap();
    let mut more = 0;
    while root.poll_transmit(1).is_some() {
        more += 1;
    }
    assert_eq!(more, 2);
}

#[test]
fn mismatched_message_size_is_reported() {
    let topo = Topology::single_switch(2);
    let plan = plan::build(&topo, 0, &TreeKind::Linear, None).unwrap();
    let setup = |msize| Setup {
        seq: 4,
        root: 0,
        msize,
        segment: 10,
        deep: false,
    };
    let mut root = Bcast::new(0, &plan.lanes, setup(100), config(), 0).unwrap();
    let mut leaf = Bcast::new(1, &plan.lanes, setup(90), config(), 0).unwrap();
    let Some(Transmit {
        message: Message::Data(h),
        ..
    }) = root.poll_transmit(0)
    else {
        panic!("root sends data first")
    };
    let err = leaf.place(0, &h).unwrap_err();
    assert!(matches!(
        err,
        EngineError::Mismatch {
            what: "message size",
            ours: 90,
            theirs: 100,
            ..
        }
    ));
    // A segment of the next broadcast is kept for later, one of a past broadcast dropped
    // (silently: the reliability below the engine already acknowledged it).
    let later = DataHeader { seq: 5, ..h };
    let leaf2 = &mut Bcast::new(1, &plan.lanes, setup(100), config(), 0).unwrap();
    assert_eq!(leaf2.place(0, &later), Ok(Placement::Later));
    assert_eq!(
        leaf2.place(0, &DataHeader { seq: 3, ..h }),
        Ok(Placement::Discard)
    );
    assert!(leaf2.poll_transmit(0).is_none(), "nothing to answer");
    // A duplicate of a segment that landed is dropped, without a word either.
    assert!(matches!(leaf2.place(0, &h), Ok(Placement::Into(_))));
    leaf2.handle_data(1, &h);
    while leaf2.poll_transmit(1).is_some() {}
    assert_eq!(leaf2.place(0, &h), Ok(Placement::Discard));
    assert!(leaf2.poll_transmit(2).is_none());
    assert!(leaf2.place(1, &h).is_err(), "data from a non-parent");
}

proptest::proptest! {
    /// Whatever arrives (garbage headers, credits from strangers), the engine answers with a
    /// value or an error, never a panic.
    #[test]
    fn arbitrary_messages_never_panic(
        from in 0usize..6,
        seq in 0u64..4,
        root in 0u32..6,
        msize in 0u64..100,
        segment in 0u32..40,
        lanes in 0u16..3,
        lane in 0u16..4,
        index in 0u32..12,
        len in 0u32..50,
        kind in 0u8..3,
    ) {
        let topo = Topology::single_switch(4);
        let plan = plan::build(&topo, 1, &TreeKind::Flat, None).unwrap();
        let setup = Setup { seq: 2, root: 1, msize: 60, segment: 10, deep: kind == 2 };
        for me in 0..4 {
            let mut b = Bcast::new(me, &plan.lanes, setup, config(), 0).unwrap();
            let h = DataHeader { seq, root, msize, segment, lanes, lane, index, len };
            let _ = b.place(from, &h);
            b.handle_data(1, &h);
            let msg = match kind {
                0 => Message::Credit { seq, lane, consumed: index },
                1 => Message::Done { seq, lane },
                _ => Message::Data(h),
            };
            let _ = b.handle_message(2, from, &msg);
            while b.poll_transmit(3).is_some() {}
            let _ = b.handle_timeout(100);
        }
    }
}
