#!/bin/sh
# pipecast's Open MPI component on the lab timed by OSU's osu_bcast (OSU Micro-Benchmarks),
# beside bench/lab_ompi.sh's bench/mpi_bcast.c: osu_bcast times each rank's own MPI_Bcast call
# (a barrier between iterations, outside the timing) and reports the average over ranks (-f:
# also the fastest and the slowest rank's average); bench/mpi_bcast.c times broadcast + barrier
# at the slowest rank and divides by T(m) measured in the same run.
#
# This script neither fetches nor builds OSU: give it an osu_bcast you built against the
# installed Open MPI (OSU_BCAST=/path/to/osu_bcast; the project ships none of OSU's code).
# One lab at $RATE on $PLACEMENT; each round runs every configuration once, in turn, in the
# reverse order in even rounds:
#   default     Open MPI's own broadcast (coll tuned)
#   pipecast    the component, tree and segment from its model (coll_pipecast_tree auto)
#   multicast   the component with coll_pipecast_tree multicast, PIPECAST_MULTICAST=udp
# (the component's options as in bench/lab_ompi.sh; `pipecast lab mpirun` adds `--mca btl
# tcp,self` and the lab's addresses, so every byte crosses the shaped links).
#
# Output: $OUT/results.jsonl (one line per round, configuration and size: osu_bcast's average,
# min and max over ranks in µs), $OUT/r*.CONFIG.log, and per size each configuration's average
# (min-max over rounds) and, per round, its ratio to `pipecast` (the trees) and to `default`
# (their time / this one's: > 1 faster).
#
# Usage: OSU_BCAST=/path/to/osu_bcast bench/lab_osu.sh [OUT_DIR]   (default /tmp/pipecast-lab-osu)
# Environment (defaults): PLACEMENT=hub4x4-interleaved (examples/PLACEMENT.json)  RATE=100mbit
#   NAME=osu (the lab)  MIN=1048576  MAX=16777216 (bytes; osu_bcast doubles from MIN)
#   ITERS=10  WARMUP=2  ROUNDS=3  CONFIGS="default pipecast multicast"
#   PIPECAST_BIN=target/release/pipecast  PIPECAST_MCA="" (more mpirun arguments for the
#   component's configurations)  STOP_AT=HH:MM:SS (UTC; runs not started by then are skipped)
set -eu
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/pipecast-lab-osu}
: "${OSU_BCAST:?set OSU_BCAST to the path of a built osu_bcast (this script does not build OSU)}"
[ -x "$OSU_BCAST" ] || { echo "OSU_BCAST=$OSU_BCAST is not an executable" >&2; exit 2; }
PLACEMENT=${PLACEMENT:-hub4x4-interleaved}
RATE=${RATE:-100mbit}
NAME=${NAME:-osu}
MIN=${MIN:-1048576}
MAX=${MAX:-16777216}
ITERS=${ITERS:-10}
WARMUP=${WARMUP:-2}
ROUNDS=${ROUNDS:-3}
CONFIGS=${CONFIGS:-"default pipecast multicast"}
P=${PIPECAST_BIN:-$PWD/target/release/pipecast}
topo=$PWD/examples/$PLACEMENT.json
mkdir -p "$OUT"
: > "$OUT/results.jsonl"
trap '"$P" lab down --name $NAME >/dev/null 2>&1 || true' EXIT INT TERM
"$P" lab up --name "$NAME" --topology "$topo" --rate "$RATE" --lldp-wait 0 >&2

COMPONENT="--mca mca_base_component_path SYS_DEFAULT:$PWD/ffi/build --mca coll_pipecast_verbose 1
  --mca coll_pipecast_topology $topo --mca coll_pipecast_profile 100mbit
  --mca coll_pipecast_if_include 198.18.0.0/16 --mca coll_pipecast_timeout_ms 30000"
round=1
while [ "$round" -le "$ROUNDS" ]; do
  order=$CONFIGS
  if [ $((round % 2)) = 0 ]; then
    order=""
    for config in $CONFIGS; do order="$config $order"; done
  fi
  for config in $order; do
    if [ -n "${STOP_AT:-}" ] && [ "$(date -u +%H:%M:%S)" \> "$STOP_AT" ]; then
      echo "== round $round $config: skipped, past STOP_AT=$STOP_AT" >&2
      continue
    fi
    case $config in
      default) args="" ;;
      pipecast) args="$COMPONENT --mca coll_pipecast_tree auto ${PIPECAST_MCA:-}" ;;
      multicast) args="$COMPONENT --mca coll_pipecast_tree multicast -x PIPECAST_MULTICAST=udp ${PIPECAST_MCA:-}" ;;
      *) echo "unknown configuration $config" >&2; exit 2 ;;
    esac
    log="$OUT/r$round.$config.log"
    echo "== round $round $config ($(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
    # 16 ranks on 2 cores: ranks waiting yield the CPU (as bench/lab_ompi.sh).
    # shellcheck disable=SC2086
    if ! timeout 900 "$P" lab mpirun --mpi openmpi --name "$NAME" -- --mca mpi_yield_when_idle 1 \
        $args "$OSU_BCAST" -m "$MIN:$MAX" -i "$ITERS" -x "$WARMUP" -f > "$log" 2>&1; then
      echo "   $config FAILED (see $log)" >&2
      continue
    fi
    if grep -q 'falling back' "$log"; then echo "   WARNING: pipecast fell back (see $log)" >&2; fi
    # osu_bcast -f: size, avg, min, max (µs over ranks), iterations (lab mpirun may prefix
    # a rank's lines with [rN]).
    sed 's/^\[r[0-9]*\] //' "$log" | awk -v r="$round" -v c="$config" \
      '$1 ~ /^[0-9]+$/ && NF == 5 { printf "{\"round\":%d,\"config\":\"%s\",\"bytes\":%s,\"avg_us\":%s,\"min_us\":%s,\"max_us\":%s,\"iters\":%s}\n", r, c, $1, $2, $3, $4, $5 }' \
      >> "$OUT/results.jsonl"
  done
  round=$((round + 1))
done
"$P" lab down --name "$NAME" >&2

python3 - "$OUT/results.jsonl" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {(r["round"], r["config"], r["bytes"]): r for r in rows}
configs = list(dict.fromkeys(r["config"] for r in rows))
rounds = sorted({r["round"] for r in rows})
print("# osu_bcast average over ranks, ms: mean (min-max over rounds); slowest rank's average, max;")
print("# vs X: X's average / this one's in the same round (> 1: faster), every round in order")
for b in sorted({r["bytes"] for r in rows}):
    for c in configs:
        got = [by[(k, c, b)] for k in rounds if (k, c, b) in by]
        if not got:
            continue
        ms = [g["avg_us"] / 1e3 for g in got]
        line = "%9d %-10s %8.2f ms (%.2f-%.2f)  slowest rank %.2f" % (
            b, c, statistics.mean(ms), min(ms), max(ms), max(g["max_us"] for g in got) / 1e3)
        for ref in ("pipecast", "default"):
            if c == ref:
                continue
            xs = [by[(k, ref, b)]["avg_us"] / by[(k, c, b)]["avg_us"]
                  for k in rounds if (k, c, b) in by and (k, ref, b) in by]
            if xs:
                line += "  vs %s [%s]" % (ref, " ".join("%.2f" % x for x in xs))
        print(line)
EOF
