#!/bin/sh
# pipecast's Open MPI component against Open MPI's own MPI_Bcast with every rank on this one
# host (issue "ranks on the same host"), side by side in one run.
#
# Runs bench/mpi_bcast.c (seed 003 Fig. 10 timing: bcast + barrier per iteration, slowest rank;
# one memcpy of the message at rank 0 in the same run) under mpirun for each NP in $NPS and
# each configuration:
#   default          Open MPI's own decision (coll tuned over the vader/sm BTL; vader moves
#                    large messages with one copy, cross-memory attach, where the kernel allows)
#   default-nocma    the same with btl_vader_single_copy_mechanism none: two copies per hop
#                    through vader's shared buffers (Open MPI where CMA is refused, e.g. in
#                    containers)
#   sm               coll/sm forced (coll_sm_priority 100)
#   han              coll/han forced (coll_han_priority 100)
#   pipecast         the component at its default settings (it may defer to Open MPI's
#                    broadcast where its model predicts no win: verbose 1 says so)
#   pipecast-forced  the component taking every size (coll_pipecast_min_bytes 1,
#                    coll_pipecast_pml_below 0, PIPECAST_HOST_MIN_BYTES=1): what the shared-memory
#                    link itself does
#   pipecast-ring    the component at its defaults with PIPECAST_SHM=ring: every fan-out
#                    through the writer's staging ring (docs/shm.md)
#   pipecast-cma     the same with PIPECAST_SHM=cma: every reader copies by cross-memory attach
#   pipecast-forced-ring  pipecast-forced through the staging ring (PIPECAST_SHM=ring): what the
#                    ring does where the defaults defer (e.g. two ranks)
# Output: $OUT/results.jsonl, $OUT/*.err, and a table on stdout: time per broadcast, its ratio
# to Open MPI's default in the same run (>1: faster than Open MPI) and to one memcpy.
#
# OSU's osu_bcast is the reference benchmark: bench/osu_local.sh runs one you built the same
# way side by side (it times each rank's own call and averages over ranks; with 3 ranks or more
# that credits a root returning before its readers, which this script's slowest rank does not).
#
# MPI=ompi5 runs Open MPI 5.0 instead (inside the Debian 13 root of bench/ompi5.sh, the
# component built for it), where the configurations are:
#   default          Open MPI 5's own decision (coll han, priority 35, over tuned)
#   tuned            coll han excluded (--mca coll ^han): tuned decides, as in 4.1
#   pipecast         the component at its default settings (its previous module is han)
# and every configuration runs with --bind-to none (Open MPI 5 binds to cores by default).
#
# Usage: bench/local_ompi.sh [OUT_DIR]     (default /tmp/pipecast-local-ompi; inside /tmp or
#   this repository for MPI=ompi5: the root sees those)
# Environment (defaults): NPS="2 4"  SIZES=4K,16K,64K,256K,1M,4M,16M  ITERS=50  BUDGET=2
#   CONFIGS="default sm han pipecast pipecast-forced" (MPI=ompi5: "default tuned pipecast")
#   BUILD=1 (0: use what is built)  MPI=ompi (or ompi5)  ROUNDS=1 (the configurations alternate
#   this many times per NP; each cell is then the median round, and w the longest single
#   iteration over every round)
set -eu
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/pipecast-local-ompi}
NPS=${NPS:-"2 4"}
SIZES=${SIZES:-4K,16K,64K,256K,1M,4M,16M}
ITERS=${ITERS:-50}
ROUNDS=${ROUNDS:-1}
BUDGET=${BUDGET:-2}
PROG=mpi_bcast
. bench/ompi_common.sh
case $MPI in
  ompi) CONFIGS=${CONFIGS:-"default sm han pipecast pipecast-forced"} ;;
  ompi5) CONFIGS=${CONFIGS:-"default tuned pipecast"} ;;
esac

for np in $NPS; do
  for round in $(seq "$ROUNDS"); do
  for config in $CONFIGS; do
    case $config in
      default) args="" ;;
      default-nocma) args="--mca btl_vader_single_copy_mechanism none" ;;
      sm) args="--mca coll_sm_priority 100" ;;
      han) args="--mca coll_han_priority 100" ;;
      tuned) args="--mca coll ^han" ;;
      pipecast) args="$COMPONENT" ;;
      pipecast-ring) args="$COMPONENT -x PIPECAST_SHM=ring" ;;
      pipecast-cma) args="$COMPONENT -x PIPECAST_SHM=cma" ;;
      pipecast-forced) args="$COMPONENT --mca coll_pipecast_min_bytes 1 --mca coll_pipecast_pml_below 0 -x PIPECAST_HOST_MIN_BYTES=1" ;;
      pipecast-forced-ring) args="$COMPONENT --mca coll_pipecast_min_bytes 1 --mca coll_pipecast_pml_below 0 -x PIPECAST_HOST_MIN_BYTES=1 -x PIPECAST_SHM=ring" ;;
      *) echo "unknown configuration $config" >&2; exit 2 ;;
    esac
    err="$OUT/np$np.$config.r$round.err"
    echo "== np $np $config round $round ($(date -u +%T))" >&2
    # shellcheck disable=SC2086
    if ! $IN timeout 600 mpirun $ROOT_ARGS --oversubscribe -np "$np" --mca mpi_yield_when_idle 1 $args \
        "$OUT/mpi_bcast" --sizes "$SIZES" --iters "$ITERS" --budget "$BUDGET" --no-p2p \
        --label "np$np/$config" >> "$OUT/results.jsonl" 2> "$err"; then
      echo "   FAILED (see $err)" >&2
    fi
  done
  done
done

python3 - "$OUT/results.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
runs = {}
for r in rows:
    np, config = r["label"].split("/", 1)
    runs.setdefault((np, config, r["bytes"]), []).append(r)
by = {}  # the median round (ROUNDS), with the worst single iteration of every round
for k, rs in runs.items():
    rs.sort(key=lambda r: r["bcast_s"])
    by[k] = dict(rs[len(rs) // 2], ok=all(r["ok"] for r in rs),
                 worst=max(r.get("iter_max_s", 0) for r in rs), rounds=len(rs))
nps = sorted({k[0] for k in by}, key=lambda s: int(s[2:]))
configs = []
for k in by:
    if k[1] not in configs:
        configs.append(k[1])
sizes = sorted({k[2] for k in by})
print("# MPI_Bcast + barrier per iteration, one host; median of %d round(s); x = Open MPI default / config (>1: faster);"
      " m = config / one memcpy; w = longest single iteration" % max(r["rounds"] for r in by.values()))
print("%-4s %9s" % ("np", "bytes") + "".join("  %33s" % c for c in configs))
for np in nps:
    for b in sizes:
        base = by.get((np, "default", b))
        cells = []
        for c in configs:
            r = by.get((np, c, b))
            if r is None:
                cells.append("  %33s" % "-")
                continue
            us = r["bcast_s"] * 1e6
            x = base["bcast_s"] / r["bcast_s"] if base and r["bcast_s"] > 0 else 0
            m = r["bcast_s"] / r["memcpy_s"] if r.get("memcpy_s") else 0
            bad = "" if r["ok"] else " WRONG"
            cells.append("  %9.1fus %4.2fx %4.1fm %9.1fus w%s" % (us, x, m, r["worst"] * 1e6, bad))
        print("%-4s %9d" % (np, b) + "".join(cells))
EOF
