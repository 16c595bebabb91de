#!/bin/sh
# Many communicators, one host (issue "one engine per process", docs/scale.md): bench/mpi_comms.c
# duplicates MPI_COMM_WORLD NDUP times and broadcasts BYTES on each, under Open MPI's own
# broadcast and under pipecast's component taking every size on one host
# (PIPECAST_HOST_MIN_BYTES=0), the configurations alternating ROUNDS times. Reports per run the
# time of creation + broadcast (slowest rank), its ratio to Open MPI's in the same round, and
# the largest over ranks of pipecast's threads, all threads and open descriptors, before the
# duplicates and after.
#
# Usage: bench/scale_comms.sh [OUT_DIR]      (default /tmp/pipecast-scale-comms)
# Environment (defaults): NP=4  NDUPS="1 16 64"  BYTES=4194304  OPS="bcast ibcast"  ROUNDS=3
#   BUILD=1 (0: use what is built)  MPI=ompi (or ompi5: inside bench/ompi5.sh's root)
set -eu
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/pipecast-scale-comms}
NP=${NP:-4}
NDUPS=${NDUPS:-"1 16 64"}
BYTES=${BYTES:-4194304}
OPS=${OPS:-"bcast ibcast"}
ROUNDS=${ROUNDS:-3}
PROG=mpi_comms
. bench/ompi_common.sh
COMPONENT="$COMPONENT -x PIPECAST_HOST_MIN_BYTES=0"

for round in $(seq "$ROUNDS"); do
  for ndup in $NDUPS; do
    for op in $OPS; do
      for config in mpi pipecast; do
        case $config in
          mpi) args="" ;;
          pipecast) args="$COMPONENT" ;;
        esac
        err="$OUT/$config.$ndup.$op.r$round.err"
        echo "== $config ndup $ndup $op round $round ($(date -u +%T))" >&2
        # shellcheck disable=SC2086
        if line=$($IN timeout 600 mpirun $ROOT_ARGS --oversubscribe -np "$NP" $args \
            "$OUT/mpi_comms" "$ndup" "$BYTES" "$op" 2> "$err"); then
          carried=$(sed -n 's/.*: \([0-9]*\) broadcasts by pipecast.*/\1/p' "$err" | awk '{n += $1} END {print n + 0}')
          echo "$line" | sed "s/^{/{\"config\":\"$config\",\"round\":$round,\"carried\":$carried,/" >> "$OUT/results.jsonl"
        else
          echo "   FAILED (see $err)" >&2
        fi
      done
    done
  done
done

python3 - "$OUT/results.jsonl" "$NP" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
np = int(sys.argv[2])
by = {}
for r in rows:
    by.setdefault((r["ndup"], r["op"], r["config"]), []).append(r)
print("# %d ranks, one host: creation + broadcast of %d bytes on each duplicate (slowest rank);"
      " median over rounds, [min-max]; x = Open MPI's time / pipecast's (>1: faster)" % (np, rows[0]["bytes"] if rows else 0))
print("%5s %6s %9s %22s %22s %6s %9s %12s %12s %7s" % ("ndup", "op", "config", "seconds", "range", "x",
      "carried", "threads", "pc threads", "fds"))
for (ndup, op, config), rs in sorted(by.items()):
    secs = sorted(r["seconds"] for r in rs)
    med = statistics.median(secs)
    mpi = by.get((ndup, op, "mpi"))
    x = statistics.median(r["seconds"] for r in mpi) / med if mpi and med > 0 else 0
    last = rs[-1]
    bad = " WRONG" if any(r["wrong"] for r in rs) else ""
    print("%5d %6s %9s %22.4f %10.4f-%-11.4f %6.2f %9d %5d->%-6d %5d->%-6d %3d->%d%s" % (
        ndup, op, config, med, secs[0], secs[-1], x, last["carried"], *last["threads"],
        *last["pipecast_threads"], *last["fds"], bad))
EOF
