#!/bin/sh
# Multicast broadcasts under faults (issue 32; docs/multicast.md), every byte checked at every
# rank (`pipecast bench` verifies its seeded pattern at every rank after every broadcast):
#   loss: the 16-machine lab (examples/hub4x4-interleaved.json, RATE per link direction):
#         multicast at 1, 4 and 16 MiB, ITERS each, rotating roots, first clean, then with
#         LOSS % loss and REORDER % reordering on every link (bench/mcast_impair.sh; no
#         netem here): × T(m), T(m) being the clean run's point-to-point time (TCP is not
#         impaired, so the impaired run's own T(m) is printed beside it).
#   soak: SOAK_BCASTS multicast broadcasts (sizes 0, 1, 1409, 100003 and 1 MiB, as many of
#         each, rotating roots) on 4 machines behind 2 switches, with LOSS % loss, DUP %
#         duplicates and REORDER % reordering on every link and a foreign sender
#         (bench/mcast_flood.py, FLOOD_PPS frames/s of junk, another job's frames, spoofed
#         and replayed frames of this job) on the group from the last machine: 0 wrong bytes
#         (every row verified), 0 hangs (the run ends by itself, every broadcast within its
#         progress timeout), and what the ranks dropped of the flood.
# Root only; needs the lab's tools (docs/lab.md), nft and python3. Takes its labs down on
# exit. Usage: bench/mcast_soak.sh [PIPECAST_BINARY] [OUT_DIR]
# Environment: PARTS (loss soak), RATE (100mbit), ITERS (5), LOSS (1), DUP (1), REORDER (1),
#   SOAK_BCASTS (1000), FLOOD_PPS (2000).
set -eu
P=$(realpath "${1:-target/release/pipecast}")
OUT=${2:-$(mktemp -d)}
PARTS=${PARTS:-loss soak}
RATE=${RATE:-100mbit}
ITERS=${ITERS:-5}
LOSS=${LOSS:-1}
DUP=${DUP:-1}
REORDER=${REORDER:-1}
SOAK_BCASTS=${SOAK_BCASTS:-1000}
FLOOD_PPS=${FLOOD_PPS:-2000}
HERE=$(dirname "$(realpath "$0")")/..
NAME=ms$(($$ % 100000))
FLOOD=
mkdir -p "$OUT"
cleanup() {
  [ -n "$FLOOD" ] && kill "$FLOOD" 2>/dev/null || true
  "$P" lab down --name $NAME >/dev/null 2>&1 || true
}
trap cleanup EXIT INT TERM

up() { # TOPOLOGY_FILE
  "$P" lab down --name $NAME >/dev/null 2>&1 || true
  "$P" lab up --name $NAME --topology "$1" --rate "$RATE" --lldp-wait 0 >/dev/null
}
bench() { # JSON_OUT TIMEOUT_S TOPOLOGY_FILE BENCH_ARGS...; keeps rank 0's JSON line
  _out=$1; _deadline=$2; _topo=$3; shift 3
  "$P" lab run --name $NAME --timeout "$_deadline" -- "$P" bench --json --topology "$_topo" \
    "$@" > "$_out.log" 2> "$_out.err" || {
    echo "bench failed ($_out): see $_out.err" >&2; tail -5 "$_out.err" >&2; return 1; }
  sed -n 's/^\[r0\] \({.*\)$/\1/p' "$_out.log" > "$_out"
}

echo "# pipecast multicast under faults: binary $P, results in $OUT"
echo "# $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

for part in $PARTS; do case $part in
loss)
  topo=$HERE/examples/hub4x4-interleaved.json
  up "$topo"
  bench "$OUT/loss-clean.json" 1800 "$topo" --tree multicast --sizes 1M,4M,16M --iters "$ITERS"
  sh "$HERE/bench/mcast_impair.sh" $NAME "$LOSS" 0 "$REORDER"
  bench "$OUT/loss-impaired.json" 1800 "$topo" --tree multicast --sizes 1M,4M,16M \
    --iters "$ITERS"
  python3 - "$OUT" "$LOSS" "$REORDER" <<'PY'
import json, sys
out, loss, reorder = sys.argv[1:]
clean = {r["bytes"]: r for r in json.load(open(f"{out}/loss-clean.json"))["results"]}
bad = {r["bytes"]: r for r in json.load(open(f"{out}/loss-impaired.json"))["results"]}
print(f"\n## 16 machines, multicast, clean and with {loss} % loss + {reorder} % reordering per link")
print("| bytes | clean T(m) ms | clean × T(m) | impaired ms | × clean T(m) | × own T(m) | frames sent | verified |")
print("|---|---|---|---|---|---|---|---|")
for b in sorted(clean):
    c, i = clean[b], bad[b]
    sent = i["transport_counters"].get("mcast_frames_sent", 0)
    print(f"| {b >> 20} MiB | {c['p2p_us']/1e3:.1f} | {c['avg_us']/c['p2p_us']:.3f} | "
          f"{i['avg_us']/1e3:.1f} | {i['avg_us']/c['p2p_us']:.3f} | {i['avg_us']/i['p2p_us']:.3f} | "
          f"{sent} | {c['verified'] and i['verified']} |")
PY
  ;;
soak)
  topo=$OUT/soak-topology.json
  cat > "$topo" <<'EOF'
{"switches": ["s0", "s1"], "links": [["s0", "s1"]],
 "machines": [{"name": "h0", "switch": "s0"}, {"name": "h1", "switch": "s0"},
              {"name": "h2", "switch": "s1"}, {"name": "h3", "switch": "s1"}]}
EOF
  up "$topo"
  sh "$HERE/bench/mcast_impair.sh" $NAME "$LOSS" "$DUP" "$REORDER"
  ip netns exec $NAME-h3 python3 "$HERE/bench/mcast_flood.py" --iface eth0 \
    --pps "$FLOOD_PPS" --seconds 7200 2> "$OUT/soak-flood.err" &
  FLOOD=$!
  per=$(( (SOAK_BCASTS + 4) / 5 ))
  start=$(date +%s)
  bench "$OUT/soak.json" 3600 "$topo" --tree multicast --sizes 0,1,1409,100003,1M \
    --iters "$per" --timeout-ms 5000
  took=$(( $(date +%s) - start ))
  kill "$FLOOD" 2>/dev/null || true; wait "$FLOOD" 2>/dev/null || true; FLOOD=
  python3 - "$OUT" "$took" "$per" <<'PY'
import json, sys
out, took, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
r = json.load(open(f"{out}/soak.json"))
rows = r["results"]
drops = {}
for x in rows:
    for k, v in x["transport_counters"].items():
        drops[k] = drops.get(k, 0) + v
n = per * len(rows)
ok = all(x["verified"] for x in rows)
print(f"\n## soak: {n} timed multicast broadcasts on 4 machines with loss, duplicates, "
      f"reordering and a foreign flood, {took} s")
print(f"every byte right at every rank: {ok}; hangs: 0 (the run ended by itself)")
for x in rows:
    print(f"  {x['bytes']:>8} B: {x['avg_us']/1e3:8.2f} ms avg, max {x['max_us']/1e3:8.2f} ms, verified {x['verified']}")
print("  counters (all ranks, timed broadcasts): " +
      ", ".join(f"{k} {v}" for k, v in sorted(drops.items())))
print("  flood: " + open(f"{out}/soak-flood.err").read().strip().replace("\n", "; "))
sys.exit(0 if ok else 1)
PY
  ;;
*) echo "unknown part $part" >&2; exit 2 ;;
esac; done
