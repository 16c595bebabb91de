#!/bin/sh
# Broadcast measurements in the lab (docs/results-lab.md): builds a lab per topology, runs
# `pipecast bench` in it, prints the ratios, tears the lab down (also on error or Ctrl-C).
# Root only; needs the lab's tools (docs/lab.md) and nft for the loss run. Usage:
#   bench/lab_bcast.sh [PIPECAST_BINARY] [OUT_DIR]   (default: target/release/pipecast, a temp dir)
# Environment: RATE (100mbit), PIPECAST_PROFILE (100mbit), SIZE (4M), ITERS (5), LOSS_ITERS (200), LOSS_SIZE (1M),
# PARTS (all of: main sweep loss), BENCH_ARGS (more bench options, e.g. "--segment 64K").
#   main:  on examples/hub4x4.json and examples/hub4x4-interleaved.json, raweth and tcp:
#          linear and naive-linear, SIZE bytes, root 0; linear / T(m) (the bench's own
#          point-to-point of the whole message in the same run), naive-linear / linear,
#          tcp / raweth.
#   sweep: hub4x4, raweth, `--tree auto,linear,binomial` at 16K..16M: what auto ran and its
#          time against the best of the three.
#   loss:  hub4x4, raweth, LOSS_ITERS linear broadcasts of LOSS_SIZE, first clean, then with
#          1 % of the pipecast frames dropped at the hub switch s0 (nftables bridge rule);
#          byte-exact (bench verifies every rank) and the slowdown.
set -eu
P=$(realpath "${1:-target/release/pipecast}")
OUT=${2:-$(mktemp -d)}
RATE=${RATE:-100mbit}
SIZE=${SIZE:-4M}
ITERS=${ITERS:-5}
LOSS_ITERS=${LOSS_ITERS:-200}
LOSS_SIZE=${LOSS_SIZE:-1M}
PARTS=${PARTS:-main sweep loss}
# The lab runs at 100 mbit: the cost model's choices (auto, segment sizes) from seed 003
# Table 2's 100 Mbit/s column unless told otherwise.
export PIPECAST_PROFILE=${PIPECAST_PROFILE:-100mbit}
HERE=$(dirname "$(realpath "$0")")/..
NAME=lb$$
mkdir -p "$OUT"
trap '"$P" lab down --name $NAME >/dev/null 2>&1 || true' EXIT INT TERM

up() { # TOPOLOGY_FILE
  "$P" lab down --name $NAME >/dev/null 2>&1 || true
  "$P" lab up --name $NAME --topology "$1" --rate "$RATE" >/dev/null
}
bench() { # JSON_OUT TOPOLOGY_FILE BENCH_ARGS...; keeps rank 0's JSON line
  _out=$1; _topo=$2; shift 2
  "$P" lab run --name $NAME --timeout 900 -- "$P" bench --json --topology "$_topo" \
    --timeout-ms 30000 ${BENCH_ARGS:-} "$@" > "$_out.log" 2> "$_out.err" || {
    echo "bench failed ($_out): see $_out.err" >&2; tail -5 "$_out.err" >&2; return 1; }
  sed -n 's/^\[r0\] \({.*\)$/\1/p' "$_out.log" > "$_out"
}
py() { python3 - "$@"; }

echo "# pipecast lab broadcasts: rate $RATE, profile $PIPECAST_PROFILE, binary $P, results in $OUT"
echo "# $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

for part in $PARTS; do case $part in
main)
  for topo in hub4x4 hub4x4-interleaved; do
    file=$HERE/examples/$topo.json
    up "$file"
    for tr in raweth tcp; do
      bench "$OUT/main-$topo-$tr.json" "$file" --transport $tr --sizes "$SIZE" \
        --tree linear,naive-linear --iters "$ITERS" --root 0
    done
  done
  py "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
print("\n## linear vs T(m), naive-linear, tcp (avg of iterations; each = bcast + barrier)")
print(f"{'topology':<20} {'transport':<12} {'T(m) ms':>8} {'linear ms':>9} {'lin/T(m)':>8} {'naive ms':>9} {'naive/lin':>9} ok")
res = {}
for topo in ["hub4x4", "hub4x4-interleaved"]:
    for tr in ["raweth", "tcp"]:
        r = json.load(open(f"{out}/main-{topo}-{tr}.json"))
        rows = {x["tree"]: x for x in r["results"]}
        lin, nai = rows["linear"], rows["naive-linear"]
        res[topo, tr] = lin["avg_us"]
        ok = all(x["verified"] for x in r["results"])
        print(f"{topo:<20} {r['transport']:<12} {lin['p2p_us']/1e3:8.1f} {lin['avg_us']/1e3:9.1f} "
              f"{lin['avg_us']/lin['p2p_us']:8.3f} {nai['avg_us']/1e3:9.1f} {nai['avg_us']/lin['avg_us']:9.2f} {ok}")
for topo in ["hub4x4", "hub4x4-interleaved"]:
    print(f"tcp/raweth linear time on {topo}: {res[topo,'tcp']/res[topo,'raweth']:.3f}")
PY
  ;;
sweep)
  file=$HERE/examples/hub4x4.json
  up "$file"
  bench "$OUT/sweep-raweth.json" "$file" --transport raweth \
    --sizes 16K,64K,256K,1M,4M,16M --tree auto,linear,binomial --iters 3 --root 0
  py "$OUT" <<'PY'
import json, sys
r = json.load(open(f"{sys.argv[1]}/sweep-raweth.json"))
print(f"\n## auto across sizes (hub4x4, {r['transport']})")
print(f"{'bytes':>9} {'auto ran':<14} {'seg':>7} {'auto ms':>8} {'linear ms':>9} {'binomial ms':>11} {'auto/best':>9} ok")
by = {}
for x in r["results"]:
    by.setdefault(x["bytes"], {})[x["tree"]] = x
for b in sorted(by):
    a, l, m = by[b]["auto"], by[b]["linear"], by[b]["binomial"]
    best = min(a["avg_us"], l["avg_us"], m["avg_us"])
    ok = a["verified"] and l["verified"] and m["verified"]
    print(f"{b:>9} {a['ran']:<14} {a['segment_bytes']:>7} {a['avg_us']/1e3:8.2f} {l['avg_us']/1e3:9.2f} "
          f"{m['avg_us']/1e3:11.2f} {a['avg_us']/best:9.2f} {ok}")
PY
  ;;
loss)
  file=$HERE/examples/hub4x4.json
  up "$file"
  bench "$OUT/loss-clean.json" "$file" --transport raweth --sizes "$LOSS_SIZE" \
    --tree linear --iters "$LOSS_ITERS" --root 0
  printf 'table bridge pcloss {\n chain lossy {\n  type filter hook forward priority 0; policy accept;\n  ether type 0x88b5 numgen random mod 100 < 1 counter drop\n }\n}\n' > "$OUT/loss.nft"
  ip netns exec $NAME-s0 nft -f "$OUT/loss.nft"
  bench "$OUT/loss-1pct.json" "$file" --transport raweth --sizes "$LOSS_SIZE" \
    --tree linear --iters "$LOSS_ITERS" --root 0
  dropped=$(ip netns exec $NAME-s0 nft list table bridge pcloss | sed -n 's/.*packets \([0-9]*\).*/\1/p')
  py "$OUT" "$dropped" <<'PY'
import json, sys
out, dropped = sys.argv[1], sys.argv[2]
c = json.load(open(f"{out}/loss-clean.json"))["results"][0]
l = json.load(open(f"{out}/loss-1pct.json"))["results"][0]
print(f"\n## {c['bytes']} B linear, raweth, hub4x4: clean vs 1 % loss at s0 ({dropped} frames dropped)")
print(f"{'case':<10} {'avg ms':>8} {'min ms':>8} {'max ms':>8} verified")
for name, x in [("clean", c), ("1% loss", l)]:
    print(f"{name:<10} {x['avg_us']/1e3:8.2f} {x['min_us']/1e3:8.2f} {x['max_us']/1e3:8.2f} {x['verified']}")
print(f"slowdown (avg): {l['avg_us']/c['avg_us']:.3f}x")
PY
  ;;
*) echo "unknown part $part (main, sweep, loss)" >&2; exit 2 ;;
esac; done
