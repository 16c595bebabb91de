#!/bin/sh
# Machines with two NICs (issue 16): multilane (lane i on rail i, through NIC i) against
# linear on one rail and against T(msize), the point-to-point time of the whole message
# through one NIC, all measured in the same `pipecast bench` run on the same lab. Builds the
# lab from examples/rails2x4.json (16 machines, 2 rails of 4 switches, every NIC RATE each
# way), tears it down on exit. Root or not (a rootless lab works the same). Usage:
#   bench/lab_rails.sh [PIPECAST_BINARY] [OUT_DIR]   (default: target/release/pipecast, a temp dir)
# Environment: RATE (100mbit), SIZES (1M,4M,16M), ITERS (3), PIPECAST_PROFILE
# (profiles/lab16-100mbit.json),
# TOPOLOGY (examples/rails2x4.json), BENCH_ARGS (more bench options), TRANSPORTS (tcp; a
# comma-separated list, e.g. tcp,raweth: raweth opens one raw socket per NIC and needs
# CAP_NET_RAW, which root and the rootless lab's user namespace have), OMPI (1: also Open MPI's
# own MPI_Bcast, default and pipeline 64K, with both NICs in btl_tcp_if_include, which
# `pipecast lab mpirun` sets on a lab with rails; needs root, mpicc and mpirun).
set -eu
P=$(realpath "${1:-target/release/pipecast}")
OUT=${2:-$(mktemp -d)}
RATE=${RATE:-100mbit}
SIZES=${SIZES:-1M,4M,16M}
ITERS=${ITERS:-3}
HERE=$(dirname "$(realpath "$0")")/..
# The lab's profile: seed 003's 100 Mbit/s L and g, and the CPU per segment end of 16 ranks
# on 2 cores (model: multilane's lanes on two rails share one CPU per rank).
export PIPECAST_PROFILE=${PIPECAST_PROFILE:-$(realpath "$HERE/profiles/lab16-100mbit.json")}
TOPOLOGY=${TOPOLOGY:-$HERE/examples/rails2x4.json}
NAME=lr$$
mkdir -p "$OUT"
trap '"$P" lab down --name $NAME >/dev/null 2>&1 || true' EXIT INT TERM

echo "# pipecast on two rails: rate $RATE per NIC, profile $PIPECAST_PROFILE, binary $P, results in $OUT"
echo "# $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
"$P" lab up --name $NAME --topology "$TOPOLOGY" --rate "$RATE" >/dev/null
# Every rank listens on eth0 and eth1 (lab run sets PIPECAST_IFACE=eth0,eth1); root 0. Each
# transport is its own bench run (T(m) measured in that run); the first one's feeds Open MPI's
# table below.
FIRST=
for T in $(echo "${TRANSPORTS:-tcp}" | tr ',' ' '); do
FIRST=${FIRST:-$T}
"$P" lab run --name $NAME --timeout 1800 -- "$P" bench --json --topology "$TOPOLOGY" \
  --transport "$T" --timeout-ms 30000 --tree multilane,linear --sizes "$SIZES" \
  --iters "$ITERS" --root 0 ${BENCH_ARGS:-} > "$OUT/rails-$T.log" 2> "$OUT/rails-$T.err" || {
  echo "bench failed: see $OUT/rails-$T.err" >&2; tail -5 "$OUT/rails-$T.err" >&2; exit 1; }
sed -n 's/^\[r0\] \({.*\)$/\1/p' "$OUT/rails-$T.log" > "$OUT/rails-$T.json"
python3 - "$OUT/rails-$T.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"\n## multilane on 2 rails vs linear (rail 0) vs T(m) (one NIC), {r['ranks']} ranks, {r['transport']}")
print("(avg of iterations, each = bcast + barrier; T(m) = the bench's point-to-point of the whole message, same run)")
print(f"{'bytes':>9} {'T(m) ms':>8} {'multilane ms':>12} {'ml/T(m)':>8} {'linear ms':>9} {'lin/T(m)':>8} {'lin/ml':>7} {'segments ml/lin':>15} ok")
by = {}
for x in r["results"]:
    by.setdefault(x["bytes"], {})[x["tree"]] = x
for b in sorted(by):
    m, l = by[b]["multilane"], by[b]["linear"]
    t = m["p2p_us"]
    ok = m["verified"] and l["verified"]
    print(f"{b:>9} {t/1e3:8.1f} {m['avg_us']/1e3:12.1f} {m['avg_us']/t:8.3f} {l['avg_us']/1e3:9.1f} "
          f"{l['avg_us']/l['p2p_us']:8.3f} {l['avg_us']/m['avg_us']:7.2f} "
          f"{str(m['segment_bytes']) + '/' + str(l['segment_bytes']):>15} {ok}")
c = {}
for x in r["results"]:
    if x["tree"] == "multilane":
        for k, v in x.get("transport_counters", {}).items():
            if k.startswith("rail"):
                c[k] = c.get(k, 0) + v
if c:
    print("multilane bytes per rail (all sizes, summed over ranks): " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
PY
done
cp "$OUT/rails-$FIRST.json" "$OUT/rails.json"

if [ "${OMPI:-1}" = 1 ] && [ "$(id -u)" = 0 ] && command -v mpicc >/dev/null && command -v mpirun >/dev/null; then
  mpicc -O2 -o "$OUT/mpi_bcast" "$HERE/bench/mpi_bcast.c"
  : > "$OUT/ompi.jsonl"
  for cfg in default pipeline-65536; do
    set --
    [ $cfg = default ] || set -- --mca coll_tuned_use_dynamic_rules 1 \
      --mca coll_tuned_bcast_algorithm 3 --mca coll_tuned_bcast_algorithm_segmentsize 65536
    timeout 900 "$P" lab mpirun --name $NAME -- --mca mpi_yield_when_idle 1 "$@" \
      "$OUT/mpi_bcast" --sizes "$SIZES" --iters "$ITERS" --budget 10 --label "$cfg" \
      >> "$OUT/ompi.jsonl" 2> "$OUT/ompi-$cfg.err" || echo "Open MPI $cfg failed: see $OUT/ompi-$cfg.err" >&2
  done
  python3 - "$OUT/rails.json" "$OUT/ompi.jsonl" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
t = {x["bytes"]: x["p2p_us"] / 1e6 for x in r["results"] if x["tree"] == "multilane"}
ml = {x["bytes"]: x["avg_us"] / 1e6 for x in r["results"] if x["tree"] == "multilane"}
print("\n## Open MPI MPI_Bcast, btl tcp over both NICs (btl_tcp_if_include 198.18.0.0/16,10.1.0.0/16)")
print("(its p2p stripes over both NICs; T(m) one NIC and multilane from the pipecast run above)")
print(f"{'config':<16} {'bytes':>9} {'bcast ms':>9} {'its p2p ms':>10} {'/T(m) 1 NIC':>11} {'/multilane':>10} ok")
for line in open(sys.argv[2]):
    x = json.loads(line)
    b = x["bytes"]
    if b not in t:
        continue
    print(f"{x['label']:<16} {b:>9} {x['bcast_s']*1e3:9.1f} {x['p2p_s']*1e3:10.1f} "
          f"{x['bcast_s']/t[b]:11.3f} {x['bcast_s']/ml[b]:10.2f} {x['ok']}")
PY
else
  echo "\n(Open MPI not run: needs root, mpicc and mpirun, and OMPI=1)"
fi
