#!/bin/sh
# pipecast's Open MPI component on the lab timed by OSU's osu_bcast and osu_ibcast (OSU
# Micro-Benchmarks), beside bench/lab_ompi.sh's bench/mpi_bcast.c: osu_bcast times each rank's
# own MPI_Bcast call (a barrier between iterations, outside the timing) and reports the average
# over ranks (-f: also the fastest and the slowest rank's average); osu_ibcast times MPI_Ibcast
# + MPI_Wait ("Pure Comm.", the average over ranks), then the same with computation of that
# length between the two ("Overall") and reports how much of the broadcast the computation hid
# ("Overlap", %; on this 2-core host 16 ranks computing starve the broadcast's progress).
# bench/mpi_bcast.c times broadcast + barrier at the slowest rank and divides by T(m) measured
# in the same run.
#
# OSU_BCAST / OSU_IBCAST=/path/to/... run ones you built against the installed Open MPI; without
# them, bench/osu_build.sh builds OSU's public source outside the repository (OSU_SRC: the
# source, a directory, tarball or git directory/URL; by default the pinned release, downloaded)
# and a finished build is reused (bench/osu_common.sh). The project ships none of OSU's code.
# One lab at $RATE on $PLACEMENT; each round runs every configuration once, in turn, in the
# reverse order in even rounds, each with every benchmark of BENCH:
#   default     Open MPI's own broadcast (coll tuned)
#   pipecast    the component, tree and segment from its model (coll_pipecast_tree auto)
#   multicast   the component with coll_pipecast_tree multicast, PIPECAST_MULTICAST=udp
# (the component's options as in bench/lab_ompi.sh; `pipecast lab mpirun` adds `--mca btl
# tcp,self` and the lab's addresses, so every byte crosses the shaped links). With IMPAIR set,
# bench/mcast_impair.sh impairs every link of the lab before the first round (UDP only: TCP,
# so `default` and `pipecast`, stays clean) and clears it after the last.
#
# Output: $OUT/results.jsonl (one line per round, benchmark, configuration and size: OSU's
# columns, bench/osu_common.sh's osu_rows), $OUT/r*.CONFIG.BENCH.log (the component's verbose
# 1 lines say how many broadcasts it carried, nonblocking ones too), and per benchmark and size
# each configuration's average (min-max over rounds; osu_ibcast: Pure Comm., and the overlap)
# and, per round, its ratio to `pipecast` (the trees) and to `default` (their time / this
# one's: > 1 faster).
#
# Usage: bench/lab_osu.sh [OUT_DIR]   (default /tmp/pipecast-lab-osu)
# Environment (defaults): PLACEMENT=hub4x4-interleaved (examples/PLACEMENT.json)  RATE=100mbit
#   NAME=osu (the lab)  MIN=1048576  MAX=16777216 (bytes; OSU doubles from MIN)
#   ITERS=10  WARMUP=2  ROUNDS=3  CONFIGS="default pipecast multicast"  BENCH=bcast (or ibcast,
#   or "bcast ibcast")  IMPAIR= (e.g. "1 1 1": LOSS DUP REORDER percent for
#   bench/mcast_impair.sh; 1 means "1 1 1")  OSU_BCAST= OSU_IBCAST= OSU_SRC= (see above)
#   BUILD=1 (0: use what is built)  PIPECAST_BIN=$CARGO_TARGET_DIR/release/pipecast (else
#   target/)  PIPECAST_MCA="" (more mpirun arguments for the component's configurations)
#   STOP_AT=HH:MM:SS (UTC; runs not started by then are skipped)
set -eu
cd "$(dirname "$0")/.."
. bench/osu_common.sh
OUT=${1:-/tmp/pipecast-lab-osu}
BENCH=${BENCH:-bcast}
for bench in $BENCH; do
  case $bench in bcast | ibcast) ;; *) echo "BENCH=$BENCH: bcast, ibcast or both" >&2; exit 2 ;; esac
done
osu_programs "$BENCH"
PLACEMENT=${PLACEMENT:-hub4x4-interleaved}
RATE=${RATE:-100mbit}
NAME=${NAME:-osu}
osu_defaults 1048576 16777216 10 2 3 "default pipecast multicast"
IMPAIR=${IMPAIR:-}
[ "$IMPAIR" = 1 ] && IMPAIR="1 1 1"
P=${PIPECAST_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/release/pipecast}
topo=$PWD/examples/$PLACEMENT.json
mkdir -p "$OUT"
: > "$OUT/results.jsonl"
osu_pipecast
trap '"$P" lab down --name $NAME >/dev/null 2>&1 || true' EXIT INT TERM
"$P" lab up --name "$NAME" --topology "$topo" --rate "$RATE" --lldp-wait 0 >&2
if [ -n "$IMPAIR" ]; then
  echo "== impairing every link: bench/mcast_impair.sh $NAME $IMPAIR" >&2
  # shellcheck disable=SC2086
  sh bench/mcast_impair.sh "$NAME" $IMPAIR >&2
fi

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
    case $config in
      default) args="" ;;
      pipecast) args="$COMPONENT --mca coll_pipecast_tree auto ${PIPECAST_MCA:-}" ;;
      multicast) args="$COMPONENT --mca coll_pipecast_tree multicast -x PIPECAST_MULTICAST=udp ${PIPECAST_MCA:-}" ;;
      *) echo "unknown configuration $config" >&2; exit 2 ;;
    esac
    for bench in $BENCH; do
      if [ -n "${STOP_AT:-}" ] && [ "$(date -u +%H:%M:%S)" \> "$STOP_AT" ]; then
        echo "== round $round $config $bench: skipped, past STOP_AT=$STOP_AT" >&2
        continue
      fi
      program=$OSU_BCAST
      [ "$bench" = ibcast ] && program=$OSU_IBCAST
      log="$OUT/r$round.$config.$bench.log"
      echo "== round $round $config osu_$bench ($(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
      # 16 ranks on 2 cores: ranks waiting yield the CPU (as bench/lab_ompi.sh).
      # shellcheck disable=SC2086
      if ! timeout 900 "$P" lab mpirun --mpi openmpi --name "$NAME" -- --mca mpi_yield_when_idle 1 \
          $args "$program" -m "$MIN:$MAX" -i "$ITERS" -x "$WARMUP" -f > "$log" 2>&1; then
        echo "   $config osu_$bench FAILED (see $log)" >&2
        continue
      fi
      if grep -q 'falling back' "$log"; then echo "   WARNING: pipecast fell back (see $log)" >&2; fi
      # Verbose 1 at the end: how many broadcasts the component carried (one rank's line).
      grep -m1 'broadcasts by pipecast' "$log" | sed 's/^/   /' >&2 || true
      osu_rows "\"round\":$round,\"bench\":\"$bench\",\"config\":\"$config\"" < "$log" >> "$OUT/results.jsonl"
    done
  done
  round=$((round + 1))
done
if [ -n "$IMPAIR" ]; then sh bench/mcast_impair.sh "$NAME" off >&2; fi
"$P" lab down --name "$NAME" >&2

python3 - "$OUT/results.jsonl" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
configs = list(dict.fromkeys(r["config"] for r in rows))
rounds = sorted({r["round"] for r in rows})
print("# average over ranks, ms: mean (min-max over rounds); the slowest rank's average, max;")
print("# vs X: X's average / this one's in the same round (> 1: faster), every round in order")
print("# osu_ibcast: Pure Comm. (MPI_Ibcast + MPI_Wait), and the overlap with computation, %")
for bench in dict.fromkeys(r.get("bench", "bcast") for r in rows):
    # osu_ibcast's Min/Max Comm. are not used: OSU 6.1's rank 0 reduces them in the other
    # order than the other ranks (MAX then MIN), so they mix both.
    avg, top = ("avg_us", "max_us") if bench == "bcast" else ("pure_us", None)
    by = {(r["round"], r["config"], r["bytes"]): r for r in rows if r.get("bench", "bcast") == bench}
    print("osu_%s" % bench)
    for b in sorted({k[2] for k in by}):
        for c in configs:
            got = [by[(k, c, b)] for k in rounds if (k, c, b) in by]
            if not got:
                continue
            ms = [g[avg] / 1e3 for g in got]
            line = "%9d %-10s %8.2f ms (%.2f-%.2f)" % (b, c, statistics.mean(ms), min(ms), max(ms))
            if top and all(top in g for g in got):
                line += "  slowest rank %.2f" % (max(g[top] for g in got) / 1e3)
            if "overlap_pct" in got[0]:
                line += "  overlap %s %%" % "/".join("%.0f" % g["overlap_pct"] for g in got)
            for ref in ("pipecast", "default"):
                if c == ref:
                    continue
                xs = [by[(k, ref, b)][avg] / by[(k, c, b)][avg]
                      for k in rounds if (k, c, b) in by and (k, ref, b) in by]
                if xs:
                    line += "  vs %s [%s]" % (ref, " ".join("%.2f" % x for x in xs))
            print(line)
EOF
