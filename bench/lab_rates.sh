#!/bin/sh
# The segment size pipecast picks at default settings against every forced one, at three link
# rates (issue 28: "defaults from 2008 Gigabit Ethernet on a 10 Gbit network"). For each RATE it
# builds a lab of 4 machines on 2 switches (hub s0 and edge s1, 2 machines each), runs in one
# `pipecast bench` job per configuration, at SIZES:
#   default  `--tree auto` with no PIPECAST_PROFILE: the profile derived from the link rate the
#            lab sets (PIPECAST_LINK_RATE) and this host's measured cost per segment
#   table2   `--tree auto` with PIPECAST_PROFILE=1gbit: what every job ran before (seed 003
#            Table 2, 1 Gbit/s)
#   S        `--tree linear --segment S` for S in SEGMENTS
# and prints, per rate and size, each configuration's time / T(m) (the bench's own
# point-to-point time of the message, same job) and default / best forced.
# Root only (the lab); needs the lab's tools (docs/lab.md). Usage:
#   bench/lab_rates.sh [PIPECAST_BINARY] [OUT_DIR]   (default: target/release/pipecast, a temp dir)
# Environment (defaults): RATES="100mbit 1gbit 10gbit"  SIZES=4M,64M
#   SEGMENTS="4K 16K 64K 256K 1M"  ITERS (per rate: 3 at 100mbit, 5 at 1gbit, 10 above)
set -eu
P=$(realpath "${1:-target/release/pipecast}")
OUT=${2:-$(mktemp -d)}
RATES=${RATES:-"100mbit 1gbit 10gbit"}
SIZES=${SIZES:-4M,64M}
SEGMENTS=${SEGMENTS:-"4K 16K 64K 256K 1M"}
NAME=lr$$
mkdir -p "$OUT"
unset PIPECAST_PROFILE PIPECAST_SEGMENT PIPECAST_TREE PIPECAST_LINK_RATE
trap '"$P" lab down --name $NAME >/dev/null 2>&1 || true' EXIT INT TERM
"$P" topo gen hub --edges 1 --per-switch 2 -o "$OUT/topo.json"

bench() { # LABEL ITERS BENCH_ARGS...; appends rank 0's JSON line, labelled, to results.jsonl
  _label=$1; _iters=$2; shift 2
  "$P" lab run --name $NAME --timeout 1800 -- "$P" bench --json --topology "$OUT/topo.json" \
    --sizes "$SIZES" --iters "$_iters" "$@" 2>"$OUT/$_label.err" |
    grep '^\[r0\] {' | sed 's/^\[r0\] //' |
    python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); r["label"]=sys.argv[1]; r["rate"]=sys.argv[2]; print(json.dumps(r))' "$_label" "$RATE" \
    >>"$OUT/results.jsonl"
}

: >"$OUT/results.jsonl"
for RATE in $RATES; do
  case $RATE in
    100mbit) ITERS=${ITERS_100MBIT:-3} ;;
    1gbit) ITERS=${ITERS_1GBIT:-5} ;;
    *) ITERS=${ITERS_FAST:-10} ;;
  esac
  "$P" lab down --name $NAME >/dev/null 2>&1 || true
  "$P" lab up --name $NAME --topology "$OUT/topo.json" --rate "$RATE" --lldp-wait 0 >/dev/null
  bench default "$ITERS" --tree auto
  PIPECAST_PROFILE=1gbit bench table2 "$ITERS" --tree auto
  for s in $SEGMENTS; do
    bench "$s" "$ITERS" --tree linear --segment "$s"
  done
done
"$P" lab down --name $NAME >/dev/null 2>&1 || true

python3 - "$OUT/results.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("# %s; time / T(m) (avg, max in brackets); default / best forced" % rows[0].get("profile", "?") if rows else "# no results")
by = {}
for r in rows:
    for x in r["results"]:
        by.setdefault((r["rate"], x["bytes"]), []).append((r["label"], r.get("profile", ""), x))
for (rate, size), xs in by.items():
    forced = [(l, x) for l, _, x in xs if l not in ("default", "table2")]
    best = min(forced, key=lambda lx: lx[1]["avg_us"])
    print("\n%s, %d bytes" % (rate, size))
    for label, profile, x in xs:
        t = x["p2p_us"]
        print("  %-8s %-12s seg %8d  %6.2f T(m)  (max %6.2f)%s" % (
            label, x["ran"], x["segment_bytes"], x["avg_us"] / t, x["max_us"] / t,
            "   profile: " + profile if label == "default" else ""))
    d = next(x for l, _, x in xs if l == "default")
    o = next(x for l, _, x in xs if l == "table2")
    print("  default / best forced (%s): %.3f    table2 / best forced: %.3f" % (
        best[0], d["avg_us"] / best[1]["avg_us"], o["avg_us"] / best[1]["avg_us"]))
EOF
echo "results: $OUT/results.jsonl"
