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
print(f"# {report['ranks']} ranks over {report['transport']} (loopback): avg / T(msize) avg, (min / T(msize) min)")
rows = report["results"]
trees = list(dict.fromkeys(r["tree"] for r in rows))
sizes = list(dict.fromkeys(r["bytes"] for r in rows))
def human(b):
    for unit, shift in (("M", 20), ("K", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift}{unit}"
    return str(b)
print(f"{'bytes':>6} {'T(m) us':>9} " + " ".join(f"{t:>17}" for t in trees))
for s in sizes:
    by_tree = {r["tree"]: r for r in rows if r["bytes"] == s}
    first = next(iter(by_tree.values()))
    p2p, p2p_min = first["p2p_us"], first.get("p2p_min_us", first["p2p_us"])
    cells = []
    for t in trees:
        r = by_tree.get(t)
        if r is None:
            cells.append(f"{'-':>17}")
            continue
        mark = "" if r["verified"] else "!"
        cells.append(f"{r['avg_us'] / p2p:>9.2f} ({r['min_us'] / p2p_min:>4.2f}){mark}")
    print(f"{human(s):>6} {p2p:>9.1f} " + " ".join(cells))
if not all(r["verified"] for r in rows):
    sys.exit("verification failed (marked !)")
PY
