//! Seed 001's step model for k-binomial trees (`../shared/seeds/001_27b88991baebfc43.txt`
//! §4.1, Theorems 1–2), in LogP time units.
//!
//! Theorem 2 counts `t_s + (X − 1)·k` steps for X packets, where one step is one packet sent by
//! one node. Mapping to seed 003's L(m), g(m): each of the t_s steps of the *first* packet is a
//! send plus the wire latency, `L(m) + g(m)` — exactly formula (1)'s hop; each of the `(X − 1)·k`
//! pipelined steps is one send gap `g(m)` (in steady state the latency overlaps with later
//! sends, as in formulas (1) and (2)). So
//!
//! `time = t_s·(L(m) + g(m)) + (X − 1)·k·g(m)`,
//!
//! which is formula (1) for k = 1. Charging all steps `L + g` would count the latency once per
//! packet, which pipelining hides; we keep the mapping consistent with formulas (1) and (2).
//! t_s and k are read from the built tree (its last first-packet arrival step and its largest
//! number of children), which for the Fig. 11 construction are Lemma 1's t_s and at most k.

use super::profile::Cost;
use crate::plan::{kbinomial, Lane};

/// Predicted time of `x` segments over a k-binomial lane.
pub fn kbinomial_time(lane: &Lane, x: u64, c: Cost) -> f64 {
    let t_s = kbinomial::arrival_steps(lane)
        .into_iter()
        .max()
        .unwrap_or(0);
    let k = lane.max_degree() as u64;
    let steps_first = t_s as f64;
    steps_first * (c.l_us + c.g_us) + x.saturating_sub(1) as f64 * k as f64 * c.g_us
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::logp;
    use crate::topology::Topology;

    #[test]
    fn k1_is_formula1() {
        let t = Topology::single_switch(9);
        let lane = kbinomial::build(&t, 0, 1).unwrap();
        let c = Cost {
            l_us: 50.0,
            g_us: 7.0,
        };
        assert_eq!(kbinomial_time(&lane, 20, c), logp::chain_time(9, 20, c));
    }

    #[test]
    fn theorem2_step_count() {
        // 8 nodes, binomial (k = 3), 3 packets: 9 steps. With L = 0, g = 1 a step costs 1.
        let t = Topology::single_switch(8);
        let lane = kbinomial::build(&t, 0, 3).unwrap();
        let c = Cost {
            l_us: 0.0,
            g_us: 1.0,
        };
        assert_eq!(kbinomial_time(&lane, 3, c), 9.0);
    }
}
