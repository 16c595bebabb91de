//! A deterministic in-memory fabric: many ranks, seeded random delays (hence reordering),
//! a virtual clock, byte-for-byte checks. Tests only.

use super::*;
use crate::plan::{self, Lane, TreeKind};
use crate::topology::{gen, Topology};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

struct Fabric {
    ranks: Vec<Option<Bcast>>,
    bufs: Vec<Vec<u8>>,
    /// (delivery time, sequence number) → (from, to, message, payload)
    queue: BTreeMap<(u64, u64), InFlight>,
    rng: ChaCha8Rng,
    counter: u64,
    max_delay: u64,
    /// Ranks that crashed: they neither send nor receive.
    dead: Vec<bool>,
    /// Probability that a message is lost.
    loss: f64,
}

/// A message on the wire: from, to, message, payload.
type InFlight = (usize, usize, Message, Vec<u8>);

/// Outcome per rank.
type Outcome = Vec<Result<(), EngineError>>;

impl Fabric {
    fn new(lanes: &[Lane], setup: Setup, config: Config, seed: u64, max_delay: u64) -> Fabric {
        let size = lanes[0].parents.len();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let message: Vec<u8> = (0..setup.msize).map(|_| rng.gen()).collect();
        let bufs = (0..size)
            .map(|r| {
                if r == setup.root {
                    message.clone()
                } else {
                    vec![0xEE; setup.msize as usize]
                }
            })
            .collect();
        let ranks = (0..size)
            .map(|r| Some(Bcast::new(r, lanes, setup, config, 0).unwrap()))
            .collect();
        Fabric {
            ranks,
            bufs,
            queue: BTreeMap::new(),
            rng,
            counter: 0,
            max_delay,
            dead: vec![false; size],
            loss: 0.0,
        }
    }

    fn flush(&mut self, r: usize, now: u64) {
        if self.dead[r] {
            return;
        }
        let Some(b) = self.ranks[r].as_mut() else {
            return;
        };
        while let Some(t) = b.poll_transmit(now) {
            if self.loss > 0.0 && self.rng.gen_bool(self.loss) {
                continue;
            }
            let payload = self.bufs[r][t.payload.clone()].to_vec();
            let at = now + 1 + self.rng.gen_range(0..=self.max_delay);
            self.counter += 1;
            self.queue
                .insert((at, self.counter), (r, t.to, t.message, payload));
        }
    }

    /// Runs until every live rank is done or failed; returns each rank's outcome.
    fn run(&mut self) -> Outcome {
        let size = self.ranks.len();
        let mut outcome: Vec<Option<Result<(), EngineError>>> = vec![None; size];
        for r in 0..size {
            self.flush(r, 0);
        }
        loop {
            for (r, o) in outcome.iter_mut().enumerate() {
                if o.is_none()
                    && !self.dead[r]
                    && self.ranks[r].as_ref().is_some_and(Bcast::is_done)
                {
                    *o = Some(Ok(()));
                }
            }
            let live_pending = (0..size).any(|r| outcome[r].is_none() && !self.dead[r]);
            if !live_pending {
                break;
            }
            let next_timeout = (0..size)
                .filter(|&r| outcome[r].is_none() && !self.dead[r])
                .filter_map(|r| self.ranks[r].as_ref().and_then(Bcast::poll_timeout))
                .min();
            let next_msg = self.queue.keys().next().map(|k| k.0);
            match (next_msg, next_timeout) {
                (Some(m), t) if t.is_none_or(|t| m <= t) => {
                    let (key, (from, to, msg, payload)) = self.queue.pop_first().unwrap();
                    let now = key.0;
                    // Finished ranks keep answering (a lossy peer may still need a credit).
                    if self.dead[to] || matches!(outcome[to], Some(Err(_))) {
                        continue;
                    }
                    let b = self.ranks[to].as_mut().unwrap();
                    let res = match msg {
                        Message::Data(h) => b.place(from, &h).map(|p| match p {
                            Placement::Into(range) => {
                                self.bufs[to][range].copy_from_slice(&payload);
                                b.handle_data(now, &h);
                            }
                            Placement::Discard => {}
                            Placement::Later => panic!("one broadcast only"),
                        }),
                        other => b.handle_message(now, from, &other).map(|_| ()),
                    };
                    if let Err(e) = res {
                        outcome[to] = Some(Err(e));
                    }
                    self.flush(to, now);
                }
                (_, Some(now)) => {
                    let live = (0..size).filter(|&r| outcome[r].is_none() && !self.dead[r]);
                    for r in live.collect::<Vec<_>>() {
                        match self.ranks[r].as_mut().unwrap().handle_timeout(now) {
                            Ok(()) => self.flush(r, now),
                            Err(e) => outcome[r] = Some(Err(e)),
                        }
                    }
                }
                (None, None) => panic!("nothing to do but ranks pending: a hang"),
                (Some(_), None) => unreachable!(),
            }
        }
        outcome.into_iter().map(|o| o.unwrap_or(Ok(()))).collect()
    }
}

fn config() -> Config {
    Config {
        window: 3,
        credit_every: 2,
        idle_timeout: 1_000_000,
        retransmit_after: None,
    }
}

fn check_broadcast(lanes: &[Lane], root: usize, msize: u64, segment: u64, seed: u64) {
    let setup = Setup {
        seq: 7,
        root,
        msize,
        segment,
        deep: seed % 2 == 0,
    };
    let mut fabric = Fabric::new(lanes, setup, config(), seed, 50);
    let outcome = fabric.run();
    for (r, o) in outcome.iter().enumerate() {
        assert_eq!(
            o,
            &Ok(()),
            "rank {r} msize {msize} seg {segment} root {root}"
        );
        assert!(
            fabric.bufs[r] == fabric.bufs[root],
            "rank {r} holds wrong bytes (msize {msize}, seg {segment}, root {root})"
        );
    }
}

fn all_trees() -> Vec<TreeKind> {
    [
        "linear",
        "flat",
        "binomial",
        "naive-linear",
        "naive-binary",
        "binary",
        "kbinomial:2",
        "multilane",
    ]
    .iter()
    .map(|s| s.parse().unwrap())
    .collect()
}

#[test]
fn every_tree_root_and_awkward_size_is_byte_exact() {
    let segment = 16;
    for size in [2, 3, 5, 8] {
        let topo = gen::random_cluster(3, size, size as u64);
        for tree in all_trees() {
            for root in 0..size {
                let Ok(plan) = plan::build(&topo, root, &tree, Some(4)) else {
                    continue; // planner not merged yet
                };
                for msize in [0, 1, 7, segment - 1, segment + 1, 5 * segment + 3] {
                    check_broadcast(&plan.lanes, root, msize, segment, msize + root as u64);
                }
            }
        }
    }
}

#[test]
fn scatter_allgather_lanes_are_byte_exact() {
    for size in [2, 4, 7] {
        for root in 0..size {
            let lanes = crate::comm::scatter_allgather(size, root);
            for msize in [0, 3, 100, 1000] {
                check_broadcast(&lanes, root, msize, 8, 3 + msize);
            }
        }
    }
}

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
fn dead_rank_makes_others_time_out() {
    let size = 6;
    let topo = Topology::single_switch(size);
    for tree in ["linear", "flat"] {
        let plan = plan::build(&topo, 0, &tree.parse().unwrap(), None).unwrap();
        let setup = Setup {
            seq: 1,
            root: 0,
            msize: 1000,
            segment: 10,
            deep: false,
        };
        let mut fabric = Fabric::new(&plan.lanes, setup, config(), 9, 20);
        fabric.dead[3] = true;
        let outcome = fabric.run();
        // Rank 3's parent and children wait for it and fail with a timeout; nobody hangs
        // (a root whose children all acknowledged may finish: it is not waiting for anyone).
        let lane = &plan.lanes[0];
        let neighbours = lane.parents[3]
            .into_iter()
            .chain(lane.children[3].iter().copied());
        for r in neighbours {
            assert!(
                matches!(&outcome[r], Err(EngineError::Timeout { waiting_for, .. }) if waiting_for.contains(&3)),
                "{tree}: rank {r} must time out waiting for 3: {outcome:?}"
            );
        }
    }
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
    // A segment of the next broadcast is kept for later, one of a past broadcast dropped.
    let later = DataHeader { seq: 5, ..h };
    let leaf2 = &mut Bcast::new(1, &plan.lanes, setup(100), config(), 0).unwrap();
    assert_eq!(leaf2.place(0, &later), Ok(Placement::Later));
    assert_eq!(
        leaf2.place(0, &DataHeader { seq: 3, ..h }),
        Ok(Placement::Discard)
    );
    assert!(leaf2.place(1, &h).is_err(), "data from a non-parent");
}

#[test]
fn deep_broadcast_root_finishes_last() {
    let size = 5;
    let topo = Topology::single_switch(size);
    let plan = plan::build(&topo, 2, &TreeKind::NaiveLinear, None).unwrap();
    let setup = Setup {
        seq: 0,
        root: 2,
        msize: 0,
        segment: 1,
        deep: true,
    };
    // Without Done messages from the far end the root must not finish: kill the chain's end.
    let mut fabric = Fabric::new(&plan.lanes, setup, config(), 1, 5);
    let last = (0..size)
        .find(|&r| r != 2 && plan.lanes[0].children[r].is_empty())
        .unwrap();
    fabric.dead[last] = true;
    let outcome = fabric.run();
    assert!(
        outcome[2].is_err(),
        "root of a deep broadcast waited for the dead leaf"
    );
}

/// A random tree over `size` ranks rooted at `root`: each rank hangs below an earlier one of
/// a random order.
fn random_lane(size: usize, root: usize, rng: &mut ChaCha8Rng) -> Lane {
    let mut order: Vec<usize> = (0..size).filter(|&r| r != root).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.gen_range(0..=i));
    }
    order.insert(0, root);
    let mut children = vec![Vec::new(); size];
    for i in 1..size {
        let parent = order[rng.gen_range(0..i)];
        children[parent].push(order[i]);
    }
    Lane::from_children(children)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    #[test]
    fn random_trees_windows_and_delays_are_byte_exact(
        size in 1usize..9,
        lanes in 1usize..4,
        msize in 0u64..3000,
        segment in 1u64..700,
        window in 1u32..6,
        credit_every in 1u32..6,
        max_delay in 0u64..200,
        seed in 0u64..1000,
    ) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let root = rng.gen_range(0..size);
        let plan: Vec<Lane> = (0..lanes).map(|_| random_lane(size, root, &mut rng)).collect();
        let setup = Setup { seq: 1, root, msize, segment, deep: seed % 3 == 0 };
        let config = Config { window, credit_every, idle_timeout: 1_000_000_000, retransmit_after: None };
        let mut fabric = Fabric::new(&plan, setup, config, seed, max_delay);
        let outcome = fabric.run();
        for (r, o) in outcome.iter().enumerate() {
            proptest::prop_assert_eq!(o, &Ok(()));
            proptest::prop_assert!(fabric.bufs[r] == fabric.bufs[root], "rank {} differs", r);
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    /// A lossy fabric: go-back-N retransmission on the engine's cumulative credits delivers
    /// every byte, on random trees, with deep (barrier-like) broadcasts too.
    #[test]
    fn lossy_fabric_with_retransmission_is_byte_exact(
        size in 2usize..7,
        lanes in 1usize..3,
        msize in 0u64..2000,
        segment in 1u64..400,
        window in 1u32..5,
        loss in 0.0f64..0.3,
        seed in 0u64..1000,
    ) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let root = rng.gen_range(0..size);
        let plan: Vec<Lane> = (0..lanes).map(|_| random_lane(size, root, &mut rng)).collect();
        let setup = Setup { seq: 3, root, msize, segment, deep: seed % 2 == 0 };
        let config = Config {
            window,
            credit_every: 1,
            idle_timeout: 1_000_000_000,
            retransmit_after: Some(200),
        };
        let mut fabric = Fabric::new(&plan, setup, config, seed, 40);
        fabric.loss = loss;
        let outcome = fabric.run();
        for (r, o) in outcome.iter().enumerate() {
            proptest::prop_assert_eq!(o, &Ok(()));
            proptest::prop_assert!(fabric.bufs[r] == fabric.bufs[root], "rank {} differs", r);
        }
    }
}

#[test]
fn stale_retransmission_is_answered() {
    // A child that moved on to broadcast 2 still tells its parent it holds broadcast 1.
    let topo = Topology::single_switch(2);
    let plan = plan::build(&topo, 0, &TreeKind::Linear, None).unwrap();
    let lossy = Config {
        retransmit_after: Some(10),
        ..config()
    };
    let setup = |seq| Setup {
        seq,
        root: 0,
        msize: 30,
        segment: 10,
        deep: false,
    };
    let mut child = Bcast::new(1, &plan.lanes, setup(2), lossy, 0).unwrap();
    let old = DataHeader {
        seq: 1,
        root: 0,
        msize: 30,
        segment: 10,
        lanes: 1,
        lane: 0,
        index: 2,
        len: 10,
    };
    assert_eq!(child.place(0, &old), Ok(Placement::Discard));
    let answer = child.poll_transmit(0).unwrap();
    assert_eq!(answer.to, 0);
    assert_eq!(
        answer.message,
        Message::Credit {
            seq: 1,
            lane: 0,
            consumed: 3
        }
    );
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
        let lossy = Config { retransmit_after: Some(5), ..config() };
        for me in 0..4 {
            let mut b = Bcast::new(me, &plan.lanes, setup, lossy, 0).unwrap();
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
