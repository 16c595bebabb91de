//! Keeping at most `PIPECAST_MAX_CONNECTIONS` shared-memory pairs set up (issue 30), as the
//! TCP link keeps its streams: a rank that broadcasts from many roots or over many trees
//! sets up a pair on each new tree edge (`setup.rs`), and this closes the least recently
//! used ones again, never one in use.
//!
//! **Which**: above the bound (pairs set up and being set up), the pairs idle both ways —
//! nothing queued or unwritten, nothing half read, no segment waiting for its broadcast, no
//! ring chunk of ours still held by the peer, no broadcast in flight that talks to the peer
//! (`Driver::talks_to`, asked only when the set in flight changes) — least recently used
//! first, get this rank's goodbye (`Record::Goodbye`).
//!
//! **The handshake**: a goodbye says "nothing more from me on this stream but releases of
//! your ring chunks". A rank that reads a peer's goodbye queues nothing new to it (messages
//! wait in the engine), writes what it had queued before (the peer still reads everything
//! up to the end of the stream, and releases the ring chunks among it), then its own
//! goodbye. Each rank shuts its write side once both goodbyes are through and its last
//! records written, and drops the pair once it read the peer's end of the stream: then
//! nothing either sent is unread, and every ring chunk is released. An end without the
//! peer's goodbye is a gone peer, as before. Both ranks may say goodbye at once: each reads
//! the other's, and both shut.
//!
//! **Setting it up again**: a later broadcast that talks to the peer sets the pair up anew
//! (`connect`; or, when the broadcast was posted while the close ran, once it is over). A
//! rank reads the old stream to its end before it answers the peer's new one (a hello from
//! a peer whose pair is closing waits, accepted, until then), and a peer dials again only
//! after it read this rank's end: so a message is never lost, duplicated or overtaken by a
//! later one. Segments by address of broadcasts not posted yet that came on the old stream
//! stay in the writer's buffer until acknowledged; their records move to the new pair.

use super::{bad, write_out, Peer, ShmLink};
use crate::transport::{Driver, TransportError};
use crate::wire::shm::Record;

impl ShmLink {
    /// Keeps at most `n` pairs set up (at least 1; `PIPECAST_MAX_CONNECTIONS`): above that,
    /// idle ones are closed, least recently used first. Pairs a broadcast in flight talks to
    /// are never closed, so a wide fan-out holds all of its own while it runs.
    pub fn set_max_connections(&mut self, n: usize) {
        self.max_pairs = n.max(1);
    }

    /// Keeps `busy` (the peers the broadcasts in flight talk to) as of the driver's set in
    /// flight: when that changed, the pairs of the peers that were busy and of those that
    /// are are marked used now (a busy pair is never closed, so it was last used when it
    /// stopped being busy). Nothing per round otherwise.
    pub(super) fn follow(&mut self, driver: &dyn Driver) {
        let at = driver.in_flight();
        if self.busy_at == Some(at) {
            return;
        }
        self.stamp_busy();
        let serves = &self.serves;
        let mut busy: Vec<usize> = driver
            .talks_to()
            .into_iter()
            .filter(|p| serves.contains(p))
            .collect();
        busy.sort_unstable();
        busy.dedup();
        self.busy = busy;
        self.busy_at = Some(at);
        self.stamp_busy();
    }

    fn stamp_busy(&mut self) {
        for p in &self.busy {
            if let Some(q) = self.peers.get_mut(p) {
                q.last_used = self.rounds;
            }
        }
    }

    /// Above the bound, says goodbye on the least recently used pairs idle both ways.
    pub(super) fn trim(&mut self) -> Result<(), TransportError> {
        if self.peers.len() + self.pairs.len() <= self.max_pairs {
            return Ok(());
        }
        let held = self.peers.values().filter(|p| live(p)).count() + self.pairs.len();
        let over = held.saturating_sub(self.max_pairs);
        if over == 0 {
            return Ok(());
        }
        let busy = &self.busy;
        let mut idle: Vec<(u64, usize)> = self
            .peers
            .iter()
            .filter(|(r, p)| live(p) && idle(p) && busy.binary_search(r).is_err())
            .map(|(&r, p)| (p.last_used, r))
            .collect();
        idle.sort_unstable();
        for (_, r) in idle.into_iter().take(over) {
            tracing::debug!(
                rank = self.me,
                peer = r,
                live = held,
                "shared memory: closing an idle pair"
            );
            self.goodbye(r)?;
        }
        Ok(())
    }

    /// Closes the pair with `r` (set up, not closing): this rank's goodbye.
    fn goodbye(&mut self, r: usize) -> Result<(), TransportError> {
        self.idle_closes += 1;
        let p = self.peers.get_mut(&r).expect("a peer");
        p.bye_sent = true;
        p.wbuf.extend_from_slice(&Record::Goodbye.encode());
        write_out(r, p)
    }

    /// Shuts this rank's side of pairs whose goodbyes both went through and whose records
    /// are written, and drops those whose peer's end was read too (nothing unread either
    /// way); a peer that a broadcast in flight talks to is dialled again.
    pub(super) fn reap(&mut self) -> Result<(), TransportError> {
        let mut over = Vec::new();
        for (&r, p) in self.peers.iter_mut() {
            if p.bye_sent && p.bye_got && p.wbuf.is_empty() && !p.shut && !p.closed {
                p.stream.shutdown(std::net::Shutdown::Write).ok();
                p.shut = true;
            }
            if p.shut && p.ended {
                over.push(r);
            }
        }
        for r in over {
            let p = self.peers.remove(&r).expect("listed");
            if !p.announced.is_empty() || p.partial.is_some() || p.rbuf.len() >= super::RECORD {
                return Err(bad(
                    r,
                    format!(
                        "it closed the pair holding {} of our ring chunks, or with records unread",
                        p.announced.len()
                    ),
                ));
            }
            self.closes += 1;
            if !p.deferred.is_empty() {
                self.leftover.entry(r).or_default().extend(p.deferred);
            }
            if self.busy.binary_search(&r).is_ok() {
                self.dial(r)?;
            }
        }
        Ok(())
    }
}

/// Set up and not being closed: it counts against the bound.
fn live(p: &Peer) -> bool {
    !p.closing() && !p.closed
}

/// Idle both ways: nothing queued or unwritten, nothing half read, no segment waiting for its
/// broadcast, and no ring chunk of ours that the peer still holds.
fn idle(p: &Peer) -> bool {
    p.out.is_empty()
        && p.wbuf.is_empty()
        && p.rbuf.is_empty()
        && p.partial.is_none()
        && p.deferred.is_empty()
        && p.announced.is_empty()
}

#[cfg(test)]
mod tests {
    use super::super::setup::tests::{links, run_threads, Tree};
    use super::super::tests::set_up;
    use super::super::{ShmMode, CHUNK};
    use crate::engine::drive::Engine;
    use crate::engine::{Bcast, Config, Setup};
    use crate::plan::baseline;
    use crate::transport::{Buffer, Buffers, Link};
    use std::time::{Duration, Instant};

    /// Every root of 7 ranks over chains and binary trees, sizes 0, 1, odd, not a multiple
    /// of the segment and several ring chunks, each rank keeping at most 2 pairs: pairs are
    /// closed and set up again, every byte lands right, and at the end each rank holds at
    /// most 2 besides those of the last broadcast (closed only while a broadcast runs), one
    /// stream each.
    #[test]
    fn pairs_over_the_bound_are_closed_when_idle_and_set_up_again_byte_exact() {
        let n = 7;
        let sizes = [0, 1, 7, 2 * 65_536 + 3, 3 * CHUNK + 17];
        let mut runs: Vec<(u64, usize, Tree, usize)> = Vec::new();
        for root in 0..n {
            for (i, &len) in sizes.iter().enumerate() {
                let tree: Tree = if (root + i) % 2 == 0 {
                    baseline::naive_linear
                } else {
                    baseline::naive_binary
                };
                runs.push((runs.len() as u64 + 1, root, tree, len));
            }
        }
        for mode in [ShmMode::Auto, ShmMode::Ring] {
            let got = run_threads(n, &runs, mode, 2);
            let closes: u64 = got.iter().map(|(_, _, c)| c["shm_closes"]).sum();
            let idle: u64 = got.iter().map(|(_, _, c)| c["shm_idle_closes"]).sum();
            assert!(
                closes > 0 && idle > 0,
                "{mode}: {closes} closes, {idle} begun"
            );
            let &(_, root, tree, _) = runs.last().expect("runs");
            let last = tree(n, root);
            for (r, (peers, held, _)) in got.iter().enumerate() {
                let others = peers
                    .iter()
                    .filter(|&&p| last.parents[r] != Some(p) && !last.children[r].contains(&p))
                    .count();
                assert!(others <= 2, "{mode}: rank {r} keeps {peers:?}");
                assert_eq!(*held, peers.len(), "{mode}: rank {r}: one stream each");
            }
        }
    }

    /// A close begun by one rank completes between broadcasts: both links, driven only while
    /// they say they serve idle (as the progress thread drives them), read the goodbyes and
    /// ends and drop the pair — no stream left on either side — without a broadcast to run.
    /// Unbounded, a link has nothing to serve between broadcasts.
    #[test]
    fn a_close_completes_between_broadcasts() {
        for mode in [ShmMode::Cma, ShmMode::Ring] {
            for both in [false, true] {
                let what = format!("{mode}, both close {both}");
                let (mut ls, _) = links(2, 0, mode);
                ls[0].connect(&[1], Duration::from_secs(60)).unwrap();
                ls[1].connect(&[0], Duration::from_secs(60)).unwrap();
                set_up(&mut ls.iter_mut().collect::<Vec<_>>());
                assert!(!ls[0].serves_idle() && !ls[1].serves_idle(), "{what}");
                for l in ls.iter_mut() {
                    l.set_max_connections(1);
                }
                assert!(ls[0].serves_idle() && ls[1].serves_idle(), "{what}");
                assert_eq!((ls[0].held(), ls[1].held()), (1, 1), "{what}");
                ls[0].goodbye(1).unwrap();
                if both {
                    ls[1].goodbye(0).unwrap();
                }
                let mut eps = [Engine::new(), Engine::new()];
                let mut bufs = [Buffers::new(), Buffers::new()];
                let start = Instant::now();
                while ls.iter().any(|l| l.serves_idle()) {
                    assert!(start.elapsed() < Duration::from_secs(20), "{what}: no end");
                    for me in [1, 0] {
                        if ls[me].serves_idle() {
                            ls[me]
                                .progress(&mut bufs[me], &mut eps[me], &|| 0, Duration::ZERO)
                                .unwrap_or_else(|e| panic!("{what}: rank {me}: {e}"));
                        }
                    }
                }
                assert_eq!((ls[0].held(), ls[1].held()), (0, 0), "{what}: streams left");
                assert_eq!((ls[0].closes, ls[1].closes), (1, 1), "{what}");
                assert!(ls[0].leftover.is_empty() && ls[1].leftover.is_empty());
            }
        }
    }

    /// Rank 0 closes its idle pair with rank 1 (and, in one variant, rank 1 its own with rank
    /// 0 at the same time) while rank 1, not having read that yet, sends it two broadcasts
    /// rank 0 has not posted: their segments come after rank 0's goodbye, wait for their
    /// broadcasts, and land once and in order, through the pair set up again, whether rank 0
    /// posts them while the close runs or after it is over. By address and through the ring.
    #[test]
    fn broadcasts_sent_while_the_pair_closes_land_once_and_in_order() {
        let len = 3 * CHUNK + 17;
        let lanes = [baseline::flat(2, 1)];
        let setup = |seq| Setup {
            seq,
            root: 1,
            msize: len as u64,
            segment: 65_536,
            deep: false,
        };
        for mode in [ShmMode::Cma, ShmMode::Ring] {
            for (during, both) in [(true, false), (false, false), (false, true)] {
                let what = format!("{mode}, posted during the close {during}, both close {both}");
                let (mut ls, _) = links(2, 0, mode);
                ls[0].connect(&[1], Duration::from_secs(60)).unwrap();
                ls[1].connect(&[0], Duration::from_secs(60)).unwrap();
                set_up(&mut ls.iter_mut().collect::<Vec<_>>());
                let mut eps = [Engine::new(), Engine::new()];
                let mut bufs = [Buffers::new(), Buffers::new()];
                let start = Instant::now();
                let clock = move || start.elapsed().as_nanos() as u64;
                let post = |me: usize, seq: u64, eps: &mut [Engine; 2], bufs: &mut [Buffers; 2]| {
                    let b = Bcast::new(me, &lanes, setup(seq), Config::default(), 0).unwrap();
                    let data = if me == 1 {
                        crate::testing::pattern(len, seq as usize)
                    } else {
                        vec![0xee; len]
                    };
                    bufs[me].insert(seq, Buffer::Owned(data));
                    let buf = bufs[me].get_mut(&seq).unwrap().as_mut_slice();
                    eps[me].post(b, buf, clock()).unwrap();
                };
                ls[0].goodbye(1).unwrap();
                if both {
                    ls[1].goodbye(0).unwrap();
                }
                for seq in [1, 2] {
                    post(1, seq, &mut eps, &mut bufs);
                    ls[1].connect(&[0], Duration::from_secs(60)).unwrap();
                }
                let mut posted = false;
                let mut rounds = 0;
                while !(1..=2).all(|s| eps[0].is_done(s) && eps[1].is_done(s)) {
                    rounds += 1;
                    assert!(rounds < 200_000, "{what}: no end");
                    if !posted && (during || ls[0].closes > 0) {
                        assert!(during || ls[0].peers.is_empty(), "{what}");
                        posted = true;
                        for seq in [1, 2] {
                            post(0, seq, &mut eps, &mut bufs);
                            ls[0].connect(&[1], Duration::from_secs(60)).unwrap();
                        }
                    }
                    for me in [1, 0] {
                        ls[me]
                            .progress(&mut bufs[me], &mut eps[me], &clock, Duration::ZERO)
                            .unwrap_or_else(|e| panic!("{what}: rank {me}: {e}"));
                    }
                }
                for seq in [1, 2] {
                    let got = bufs[0][&seq].as_slice();
                    assert!(
                        got == crate::testing::pattern(len, seq as usize).as_slice(),
                        "{what}: broadcast {seq}: wrong bytes"
                    );
                }
                assert_eq!((ls[0].closes, ls[1].closes), (1, 1), "{what}");
                let begun = (ls[0].idle_closes, ls[1].idle_closes);
                assert_eq!(begun, (1, u64::from(both)), "{what}");
                assert_eq!(ls[0].peers.len(), 1, "{what}: set up again");
                let c = ls[0].counters();
                let early = c["shm_deferred_bytes"] + c["shm_held_bytes"];
                // Unless rank 1 closed first (its broadcasts then wait for the new pair), they
                // came on the closing one, before rank 0 posted them.
                assert!(
                    during || both || early > 0,
                    "{what}: nothing came early: {c:?}"
                );
                // Nothing of the old pair is left over.
                assert!(ls[0].leftover.is_empty() && ls[1].leftover.is_empty());
            }
        }
    }

    /// A goodbye from a peer that then sends anything but ring releases is an error, not a
    /// silent loss.
    #[test]
    fn records_after_a_goodbye_are_an_error() {
        let (mut ls, _) = links(2, 0, ShmMode::Cma);
        ls[0].connect(&[1], Duration::from_secs(60)).unwrap();
        set_up(&mut ls.iter_mut().collect::<Vec<_>>());
        let p = ls[1].peers.get_mut(&0).unwrap();
        p.wbuf
            .extend_from_slice(&crate::wire::shm::Record::Goodbye.encode());
        p.wbuf
            .extend_from_slice(&crate::wire::shm::Record::Goodbye.encode());
        super::write_out(0, p).unwrap();
        let mut ep = Engine::new();
        let mut bufs = Buffers::new();
        let mut failed = None;
        for _ in 0..1000 {
            if let Err(e) = ls[0].progress(&mut bufs, &mut ep, &|| 0, Duration::ZERO) {
                failed = Some(e.to_string());
                break;
            }
        }
        let e = failed.expect("an error");
        assert!(e.contains("after its goodbye"), "{e}");
    }
}
