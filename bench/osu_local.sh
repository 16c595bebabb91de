#!/bin/sh
# pipecast's Open MPI component against Open MPI's own MPI_Bcast on this one host, timed by
# OSU's osu_bcast (OSU Micro-Benchmarks): each rank times its own MPI_Bcast call, with a
# barrier between iterations, and osu_bcast reports the average over ranks (and, with -f, the
# fastest and slowest rank's average).
#
# OSU_BCAST=/path/to/osu_bcast runs one you built; without it, bench/osu_build.sh builds OSU's
# public source against the installed Open MPI outside the repository (OSU_SRC: the source, a
# directory, tarball or git directory/URL; by default the pinned release, downloaded) and a
# finished build is reused. Each round runs every configuration once, in turn (in the
# reverse order in even rounds, so that what comes first in a round weighs on each alike):
#   ompi                  --mca coll ^pipecast: Open MPI's own broadcast, the component not loaded
#   pipecast              the component at its defaults (it defers to Open MPI's broadcast where
#                         its rules say so: the .log files show verbose 1's reason and counts)
#   pipecast-forced       the component taking every size (coll_pipecast_min_bytes 1,
#                         coll_pipecast_pml_below 0, PIPECAST_HOST_MIN_BYTES=1)
#   pipecast-forced-ring  the same with every fan-out through the writer's staging ring
#                         (PIPECAST_SHM=ring)
#   pipecast-forced-cma   the same with every reader attaching (PIPECAST_SHM=cma)
# With LOCK set, each round holds that lock file (flock) while it runs, so that rounds run on a
# machine other users of the lock leave quiet, and they may run between rounds.
#
# Output: $OUT/results.jsonl (one line per round, np, configuration and size: osu_bcast's
# average, min and max over ranks in µs), $OUT/*.log, and per np and size: each
# configuration's average (min–max over rounds), and its ratio to `ompi` in the same round
# (ompi's time / the configuration's; > 1: faster than Open MPI): min–max, median, and the
# ratio of every round in order.
#
# Usage: bench/osu_local.sh [OUT_DIR]  (default /tmp/pipecast-osu)
# Environment (defaults): NPS=2  MIN=4194304  MAX=67108864 (bytes: osu_bcast reads plain
#   numbers, "16M" is 16)  ITERS=20  WARMUP=10  ROUNDS=3  CONFIGS="ompi pipecast"
#   LOCK= (e.g. /tmp/pipecast-cpu.lock)  MPIRUN_ARGS= (more mpirun options for every run)
#   BUILD=1 (0: use what is built)  OSU_BCAST= (unset: built, see above)  OSU_SRC=
#   (bench/osu_common.sh)
set -eu
SELF=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$SELF")/.."
. bench/osu_common.sh
if [ "${1:-}" != "--round" ]; then
  OUT=${1:-/tmp/pipecast-osu}
  LOCK=${LOCK:-}
  osu_programs bcast
fi
NPS=${NPS:-2}
osu_defaults 4194304 67108864 20 10 3 "ompi pipecast"
MPIRUN_ARGS=${MPIRUN_ARGS:-}
export OUT OSU_BCAST NPS MIN MAX ITERS WARMUP CONFIGS MPIRUN_ARGS

if [ "${1:-}" = "--round" ]; then
  # One round (run by the loop below, under LOCK when it is set).
  round=$2
  ROOT_ARGS=""
  [ "$(id -u)" = 0 ] && ROOT_ARGS="--allow-run-as-root"
  COMPONENT="--mca mca_base_component_path SYS_DEFAULT:$PWD/ffi/build"
  FORCED="--mca coll_pipecast_min_bytes 1 --mca coll_pipecast_pml_below 0 -x PIPECAST_HOST_MIN_BYTES=1"
  echo "== round $round ($(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  order=$CONFIGS
  if [ $((round % 2)) = 0 ]; then
    order=""
    for config in $CONFIGS; do order="$config $order"; done
  fi
  for np in $NPS; do
    for config in $order; do
      case $config in
        ompi) args="$COMPONENT --mca coll ^pipecast" ;;
        pipecast) args="$COMPONENT --mca coll_pipecast_verbose 1" ;;
        pipecast-forced) args="$COMPONENT --mca coll_pipecast_verbose 1 $FORCED" ;;
        pipecast-forced-ring) args="$COMPONENT --mca coll_pipecast_verbose 1 $FORCED -x PIPECAST_SHM=ring" ;;
        pipecast-forced-cma) args="$COMPONENT --mca coll_pipecast_verbose 1 $FORCED -x PIPECAST_SHM=cma" ;;
        *) echo "unknown configuration $config" >&2; exit 2 ;;
      esac
      log="$OUT/r$round.np$np.$config.log"
      # shellcheck disable=SC2086
      if ! timeout 600 mpirun $ROOT_ARGS --oversubscribe -np "$np" $MPIRUN_ARGS $args \
          "$OSU_BCAST" -m "$MIN:$MAX" -i "$ITERS" -x "$WARMUP" -f > "$log" 2>&1; then
        echo "   np $np $config FAILED (see $log)" >&2
        continue
      fi
      # osu_bcast -f: size, avg, min, max (µs over ranks), iterations.
      osu_rows "\"round\":$round,\"np\":$np,\"config\":\"$config\"" < "$log" >> "$OUT/results.jsonl"
    done
  done
  exit 0
fi

mkdir -p "$OUT"
: > "$OUT/results.jsonl"
osu_pipecast
round=1
while [ "$round" -le "$ROUNDS" ]; do
  ${LOCK:+flock "$LOCK"} sh "$SELF" --round "$round"
  round=$((round + 1))
done

python3 - "$OUT/results.jsonl" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {(r["round"], r["np"], r["config"], r["bytes"]): r for r in rows}
configs = list(dict.fromkeys(r["config"] for r in rows))
rounds = sorted({r["round"] for r in rows})
print("# osu_bcast average over ranks, ms: mean (min-max over rounds); x = ompi / config in the same round (>1: faster than Open MPI)")
print("# ranks spread: the slowest rank's average / the fastest rank's, max over rounds")
for np in sorted({r["np"] for r in rows}):
    for b in sorted({r["bytes"] for r in rows if r["np"] == np}):
        for c in configs:
            got = [by[(k, np, c, b)] for k in rounds if (k, np, c, b) in by]
            if not got:
                continue
            ms = [g["avg_us"] / 1e3 for g in got]
            spread = max(g["max_us"] / g["min_us"] for g in got if g["min_us"] > 0)
            line = "np %d %9d %-21s %7.2f ms (%.2f-%.2f)  ranks %.2f" % (
                np, b, c, statistics.mean(ms), min(ms), max(ms), spread)
            if c != "ompi":
                xs = [by[(k, np, "ompi", b)]["avg_us"] / by[(k, np, c, b)]["avg_us"]
                      for k in rounds if (k, np, c, b) in by and (k, np, "ompi", b) in by]
                if xs:
                    line += "  x %.2f-%.2f median %.2f  [%s]" % (
                        min(xs), max(xs), statistics.median(xs), " ".join("%.2f" % x for x in xs))
            print(line)
EOF
