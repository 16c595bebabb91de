//! The per-peer reliability alone (one sender, one receiver, items numbered 0..n) over a
//! pair of simulated links: data one way, acknowledgements the other.

use crate::engine::reliable::{Accept, Config, Pacer, Receiver, Sender};
use crate::sim::{LinkModel, SimLink};

#[derive(Debug, Clone, Copy)]
enum Pkt {
    /// (number, item, copy number)
    Data(u64, u32, u8),
    /// (ack, sack, credit, repaired)
    Ack(u64, u64, u32, Option<(u64, u8)>),
}

/// A 1500-byte frame, as on raw Ethernet.
const FRAME: u64 = 1500;

/// Sends `n` items over a link with the given loss and duplication; returns what the
/// receiver delivered, the virtual time it took and the retransmissions.
fn run(seed: u64, n: u32, loss: f64, duplicate: f64, config: Config) -> (Vec<u32>, u64, u64) {
    // 50-150 µs: reorders frames sent close together (in order only when lossless).
    let model = if loss == 0.0 && duplicate == 0.0 {
        LinkModel::reliable(100_000)
    } else {
        LinkModel {
            latency: 50_000,
            jitter: 100_000,
            loss,
            duplicate,
            ..LinkModel::reliable(0)
        }
    };
    let mut data: SimLink<Pkt> = SimLink::new(model, seed);
    let mut acks: SimLink<Pkt> = SimLink::new(model, seed + 1_000);
    let mut tx: Sender<u32> = Sender::new(config);
    let mut rx = Receiver::new(config);
    let mut pacer = Pacer::new(config.rate, config.burst, 0);
    let mut delivered = Vec::new();
    let mut next_item = 0u32;
    let mut now = 0u64;
    let mut steps = 0;
    while (next_item < n || !tx.is_idle()) && steps < 1_000_000 {
        steps += 1;
        tx.handle_timeout(now);
        // Send what the pacer and credit allow.
        loop {
            if tx.has_retransmit() {
                if !pacer.try_take(now, FRAME) {
                    break;
                }
                let (s, &v) = tx.poll_retransmit(now).expect("queued");
                let copy = tx.next_copy(s).expect("unacknowledged");
                tx.sent(s, now);
                data.send(now, FRAME as usize, Pkt::Data(s, v, copy));
            } else if next_item < n && tx.can_send() {
                if !pacer.try_take(now, FRAME) {
                    break;
                }
                let s = tx.push(now, next_item);
                tx.sent(s, now);
                data.send(now, FRAME as usize, Pkt::Data(s, next_item, 1));
                next_item += 1;
            } else {
                break;
            }
        }
        // Next event: an arrival, a timer or the pacer.
        let mut at = tx.poll_timeout().unwrap_or(u64::MAX);
        for t in [data.next_arrival(), acks.next_arrival()]
            .into_iter()
            .flatten()
        {
            at = at.min(t);
        }
        if next_item < n && tx.can_send() || tx.has_retransmit() {
            at = at.min(pacer.ready_at(now, FRAME).max(now + 1));
        }
        if at == u64::MAX {
            break;
        }
        now = now.max(at);
        while let Some((_, p)) = data.pop_arrived(now) {
            let Pkt::Data(s, v, copy) = p else {
                unreachable!("acks go the other way")
            };
            if rx.accept(s) == Accept::Fresh {
                delivered.push(v);
                if copy != 1 {
                    rx.repaired(s, copy);
                }
            }
        }
        while let Some((_, p)) = acks.pop_arrived(now) {
            let Pkt::Ack(a, s, c, r) = p else {
                unreachable!("data goes the other way")
            };
            tx.on_ack(now, a, s, c, r);
        }
        if rx.ack_due() {
            let (a, s, c) = rx.ack();
            rx.acked();
            acks.send(now, 64, Pkt::Ack(a, s, c, rx.take_repaired()));
        }
    }
    (delivered, now, tx.retransmits)
}

fn exactly_once(delivered: &[u32], n: u32) {
    let mut sorted = delivered.to_vec();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        (0..n).collect::<Vec<_>>(),
        "every item exactly once"
    );
}

#[test]
fn lossless_link_delivers_everything_without_retransmits() {
    let (d, _, re) = run(1, 2000, 0.0, 0.0, Config::default());
    exactly_once(&d, 2000);
    assert_eq!(re, 0);
}

#[test]
fn loss_duplication_and_reordering_still_deliver_exactly_once() {
    for seed in 0..4 {
        for (loss, dup) in [(0.01, 0.0), (0.05, 0.05), (0.3, 0.1)] {
            let (d, _, re) = run(seed, 1000, loss, dup, Config::default());
            exactly_once(&d, 1000);
            assert!(re > 0, "seed {seed}: loss {loss} needs retransmits");
        }
    }
}

#[test]
fn a_small_credit_still_completes() {
    let config = Config {
        window: 4,
        ..Config::default()
    };
    let (d, _, _) = run(3, 500, 0.1, 0.05, config);
    exactly_once(&d, 500);
}

#[test]
fn pacing_bounds_the_rate() {
    // 1500-byte frames at 1.5 MB/s: 1000 frames need at least ~1 s of virtual time minus
    // the burst.
    let config = Config {
        rate: Some(1_500_000),
        burst: 15_000,
        ..Config::default()
    };
    let (d, t, _) = run(4, 1000, 0.0, 0.0, config);
    exactly_once(&d, 1000);
    assert!(
        t >= 980_000_000,
        "finished at {t} virtual ns, faster than the pacing rate"
    );
    let (_, t_unpaced, _) = run(4, 1000, 0.0, 0.0, Config::default());
    assert!(t_unpaced < t / 10);
}
