//! The optimal multi-tree throughput: the linear program SSB(G) of seed 004 §4.1 (program (2),
//! constraints (a)–(j)), solved with the pure-Rust simplex solver `microlp`.
//!
//! SSB(G) routes, per destination w, a flow `x_w` of value TP from the source to w, and asks
//! `n_uv ≥ x_w^{uv}` on every edge (constraint (d)), under the one-port constraints (e)–(j) on
//! `t_uv = n_uv T_uv`. For fixed `n`, flows of value TP to every w exist iff every source–w cut
//! carries at least TP (max-flow min-cut), so SSB(G) is equivalently
//!
//! ```text
//! maximize TP  s.t.  Σ_{v} n_uv T_uv ≤ 1 (g, j),  Σ_{u} n_uv T_uv ≤ 1 (f, i),
//!                    0 ≤ n_uv ≤ 1 / T_uv (h),  Σ_{e leaving S} n_e ≥ TP for every cut S.
//! ```
//!
//! [`ssb`] solves this by cut generation: it starts from the cuts around the source and around
//! each destination, then repeatedly computes a max flow to every destination under the
//! current `n` and adds the violated minimum cuts, re-solving from the previous basis (dual
//! simplex), until no cut is violated. That LP has |E| + 1 variables instead of the |V|·|E| of
//! the direct program; [`ssb_direct`] keeps the direct program for tests on small platforms.
//!
//! Program (2) writes (a)–(c) without conservation at the source and at w; read literally, a
//! flow circulating through a 2-cycle at w would satisfy (b) without coming from the source.
//! Both solvers here use the intended net-flow form (as in the paper's reference [6]).

use super::maxflow::{cut_edges, min_cut};
use super::platform::{EdgeId, Platform};
use super::HeteroError;
use microlp::{
    ComparisonOp, OptimizationDirection, Problem, SolutionStatus, SolveOutcome, Variable,
};
use std::collections::BTreeSet;

/// The LP optimum.
#[derive(Debug, Clone, PartialEq)]
pub struct Ssb {
    /// TP: the optimal throughput with several trees (slices per time unit of the platform).
    pub throughput: f64,
    /// `n_uv` per edge: slices per time unit crossing it in the optimum found (many optima
    /// exist; values below 1e-9 of the largest are cleaned to 0).
    pub n: Vec<f64>,
    /// Cut constraints in the final LP, and cut-generation rounds.
    pub cuts: usize,
    pub rounds: usize,
}

/// Largest number of cut-generation rounds before giving up with an error.
const MAX_ROUNDS: usize = 5_000;
/// Relative tolerance for a cut to count as violated.
const CUT_TOL: f64 = 1e-9;

/// Edge times divided by their mean, so the LP's coefficients sit near 1 whatever the unit.
fn scaled_times(platform: &Platform) -> (Vec<f64>, f64) {
    let times: Vec<f64> = platform.edges().iter().map(|e| e.time).collect();
    let mean = times.iter().sum::<f64>() / times.len().max(1) as f64;
    (times.iter().map(|t| t / mean).collect(), mean)
}

fn solver_error(what: &str, e: microlp::Error) -> HeteroError {
    HeteroError::Solver(format!("{what}: {e}"))
}

fn solution(what: &str, outcome: SolveOutcome) -> Result<microlp::Solution, HeteroError> {
    match outcome {
        SolveOutcome::Solution(s) if s.status() == SolutionStatus::Optimal => Ok(s),
        SolveOutcome::Solution(s) => Err(HeteroError::Solver(format!(
            "{what}: the solver stopped without proving optimality ({:?})",
            s.termination_reason()
        ))),
        SolveOutcome::Interrupted(i) => Err(HeteroError::Solver(format!(
            "{what}: the solver was interrupted ({:?})",
            i.termination_reason()
        ))),
    }
}

/// Adds the one-port constraints (f)–(j) and bounds (h) on the `n` variables.
fn one_port_rows(problem: &mut Problem, platform: &Platform, t: &[f64], n: &[Variable]) {
    for u in 0..platform.size() {
        for edges in [platform.out_edges(u), platform.in_edges(u)] {
            if edges.len() > 1 {
                let row: Vec<(Variable, f64)> = edges.iter().map(|&e| (n[e], t[e])).collect();
                problem.add_constraint(row, ComparisonOp::Le, 1.0);
            }
        }
    }
}

/// SSB(G) by cut generation (see the module doc). A 65-node platform of density 0.15 takes
/// 0.04–0.16 s here (about 100 cuts, 4–8 rounds; `docs/hetero.md`).
pub fn ssb(platform: &Platform) -> Result<Ssb, HeteroError> {
    let (t, mean) = scaled_times(platform);
    let m = platform.edges().len();
    let mut problem = Problem::new(OptimizationDirection::Maximize);
    let n: Vec<Variable> = t
        .iter()
        .map(|&te| problem.add_var(0.0, (0.0, 1.0 / te)))
        .collect();
    let tp = problem.add_var(1.0, (0.0, f64::INFINITY));
    one_port_rows(&mut problem, platform, &t, &n);
    let mut cuts: BTreeSet<Vec<EdgeId>> = BTreeSet::new();
    let cut_row = |edges: &[EdgeId]| -> Vec<(Variable, f64)> {
        let mut row: Vec<(Variable, f64)> = edges.iter().map(|&e| (n[e], 1.0)).collect();
        row.push((tp, -1.0));
        row
    };
    // Initial cuts: around the source and around each destination.
    let mut initial = vec![platform.out_edges(platform.source()).to_vec()];
    for w in 0..platform.size() {
        if w != platform.source() {
            initial.push(platform.in_edges(w).to_vec());
        }
    }
    for mut edges in initial {
        edges.sort_unstable();
        if cuts.insert(edges.clone()) {
            problem.add_constraint(cut_row(&edges), ComparisonOp::Ge, 0.0);
        }
    }
    let mut sol = solution(
        "SSB(G)",
        problem.solve().map_err(|e| solver_error("SSB(G)", e))?,
    )?;
    for round in 1..=MAX_ROUNDS {
        let value = sol.var_value(tp);
        let caps: Vec<f64> = n.iter().map(|&v| sol.var_value(v)).collect();
        let eps = 1e-12 * value.max(1e-300);
        let mut violated = Vec::new();
        for w in 0..platform.size() {
            if w == platform.source() {
                continue;
            }
            let cut = min_cut(platform, &caps, w, eps);
            if cut.value < value * (1.0 - CUT_TOL) {
                // Among the violated cuts, prefer one with few edges: a cut padded with
                // zero-capacity edges is weak (the LP satisfies it by raising an edge that
                // does not lead to w), and on sparse platforms adding such cuts one by one
                // takes thousands of rounds. Tie-break by a small capacity on every edge.
                let pad = value * 1e-3 / m as f64;
                let padded: Vec<f64> = caps.iter().map(|c| c + pad).collect();
                let lean = cut_edges(platform, &min_cut(platform, &padded, w, eps).source_side);
                let lean_value: f64 = lean.iter().map(|&e| caps[e]).sum();
                let edges = if lean_value < value * (1.0 - CUT_TOL) {
                    lean
                } else {
                    cut_edges(platform, &cut.source_side)
                };
                if cuts.insert(edges.clone()) {
                    violated.push(edges);
                }
            }
        }
        if violated.is_empty() {
            let mut n_uv: Vec<f64> = caps.iter().map(|c| c / mean).collect();
            let biggest = n_uv.iter().copied().fold(0.0, f64::max);
            for x in &mut n_uv {
                if *x < 1e-9 * biggest {
                    *x = 0.0;
                }
            }
            debug_assert_eq!(n_uv.len(), m);
            return Ok(Ssb {
                throughput: value / mean,
                n: n_uv,
                cuts: cuts.len(),
                rounds: round,
            });
        }
        for edges in violated {
            let outcome = sol
                .add_constraint(cut_row(&edges), ComparisonOp::Ge, 0.0)
                .map_err(|e| solver_error("SSB(G) with a new cut", e))?;
            sol = solution("SSB(G) with a new cut", outcome)?;
        }
    }
    Err(HeteroError::Solver(format!(
        "SSB(G): cut generation did not converge in {MAX_ROUNDS} rounds"
    )))
}

/// SSB(G) written directly (seed 004 §4.1, program (2) in net-flow form): variables
/// `x_w^{uv}` for every destination w and edge, `n_uv` and TP. |V|·|E| variables: meant as a
/// reference for tests on small platforms.
pub fn ssb_direct(platform: &Platform) -> Result<f64, HeteroError> {
    let (t, mean) = scaled_times(platform);
    let s = platform.source();
    let mut problem = Problem::new(OptimizationDirection::Maximize);
    let n: Vec<Variable> = t
        .iter()
        .map(|&te| problem.add_var(0.0, (0.0, 1.0 / te)))
        .collect();
    let tp = problem.add_var(1.0, (0.0, f64::INFINITY));
    one_port_rows(&mut problem, platform, &t, &n);
    for w in 0..platform.size() {
        if w == s {
            continue;
        }
        let x: Vec<Variable> = t
            .iter()
            .map(|_| problem.add_var(0.0, (0.0, f64::INFINITY)))
            .collect();
        // (d): x_w ≤ n on every edge.
        for e in 0..t.len() {
            problem.add_constraint([(x[e], 1.0), (n[e], -1.0)], ComparisonOp::Le, 0.0);
        }
        // (a)–(c): net inflow is TP at w, 0 at other destinations (the source's row follows).
        for v in 0..platform.size() {
            if v == s {
                continue;
            }
            let mut row: Vec<(Variable, f64)> = Vec::new();
            row.extend(platform.in_edges(v).iter().map(|&e| (x[e], 1.0)));
            row.extend(platform.out_edges(v).iter().map(|&e| (x[e], -1.0)));
            if v == w {
                row.push((tp, -1.0));
            }
            problem.add_constraint(row, ComparisonOp::Eq, 0.0);
        }
    }
    let sol = solution(
        "direct SSB(G)",
        problem
            .solve()
            .map_err(|e| solver_error("direct SSB(G)", e))?,
    )?;
    Ok(sol.var_value(tp) / mean)
}
