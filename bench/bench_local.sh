#!/bin/sh
# Whole-broadcast benchmark on loopback: N local ranks (default 8), every size and tree,
# ratio of each broadcast's time to the point-to-point time of the same message measured in
# the same run (seed 003 §5 method: barrier, then iterations of bcast + barrier).
#
#   bench/bench_local.sh                 # 8 ranks, default sizes and trees
#   RANKS=4 bench/bench_local.sh --sizes 1M,16M --tree linear,flat
#
# Extra arguments go to `pipecast bench`. Needs python3 (for the JSON) and a release build.
set -eu
cd "$(dirname "$0")/.."
RANKS=${RANKS:-8}
cargo build --release --quiet
out=$(mktemp)
trap 'rm -f "$out"' EXIT
./target/release/pipecast bench --local "$RANKS" --json "$@" >"$out"
python3 - "$out" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
print(f"# {report['ranks']} ranks over {report['transport']} (loopback): time / T(msize)")
rows = report["results"]
trees = list(dict.fromkeys(r["tree"] for r in rows))
sizes = list(dict.fromkeys(r["bytes"] for r in rows))
def human(b):
    for unit, shift in (("M", 20), ("K", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift}{unit}"
    return str(b)
print(f"{'bytes':>8} {'T(m) us':>10} " + " ".join(f"{t:>18}" for t in trees))
for s in sizes:
    by_tree = {r["tree"]: r for r in rows if r["bytes"] == s}
    p2p = next(iter(by_tree.values()))["p2p_us"]
    cells = []
    for t in trees:
        r = by_tree.get(t)
        mark = "" if r is None or r["verified"] else "!"
        cells.append(f"{r['avg_us'] / p2p:>17.2f}{mark}" if r else f"{'-':>18}")
    print(f"{human(s):>8} {p2p:>10.1f} " + " ".join(cells))
if not all(r["verified"] for r in rows):
    sys.exit("verification failed (marked !)")
PY
