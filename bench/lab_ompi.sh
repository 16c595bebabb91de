#!/bin/sh
# pipecast's Open MPI component against Open MPI's own MPI_Bcast on the lab (root only).
#
# For each placement (a topology file: which switch machine r = rank r hangs off), builds the
# lab at $RATE, then runs bench/mpi_bcast.c (seed 003 Fig. 10 timing + T(msize) point to point
# in the same run) once per configuration:
#   default          Open MPI's own decision (coll tuned)
#   pipeline-S       coll_tuned_bcast_algorithm 3, segment S, for each S in $SEGS
#   chain-S          coll_tuned_bcast_algorithm 2, segment S
#   pipecast         the component (tcp; its topology = the placement's file, profile 100mbit,
#                    tree and segment size chosen by its model)
#   pipecast_seg-S   the same with segment S forced, for each S in $PIPECAST_SEGS
#   pipecast_win-W   the model's choices with the engine window (segments in flight per child,
#                    default 16) set to W (PIPECAST_WINDOW), for each W in $PIPECAST_WINDOWS
#   raweth           the component over raw Ethernet frames (coll_pipecast_transport raweth,
#                    the lab's eth0), tree and segment size from its model
#   multicast        the component with the switches copying the bytes: coll_pipecast_tree
#                    multicast, PIPECAST_MULTICAST=udp (UDP multicast over the lab's eth0,
#                    repair by TCP unicast; docs/multicast.md)
# with `--mca btl tcp,self` and `btl_tcp_if_include 198.18.0.0/16` (`pipecast lab mpirun` sets
# both, LAB.md), so every byte crosses the shaped links. Output: $OUT/results.jsonl (one line
# per configuration and size, "label" = placement/configuration), $OUT/*.err (stderr per run;
# the pipecast runs' component counters), and the table of bench/lab_ompi_table.py on stdout.
#
# MPI=ompi5 runs Open MPI 5.0 instead (`pipecast lab mpirun --mpi ompi5`: inside the Debian 13
# root of bench/ompi5.sh, the component built for it), with the configurations
#   default          Open MPI 5's own decision (coll han: tuned inside a machine, libnbc between)
#   tuned            coll han excluded (--mca coll ^han): tuned decides, as in 4.1
#   pipecast         as above (its previous module is han)
#
# Usage: bench/lab_ompi.sh [OUT_DIR]       (default /tmp/pipecast-lab-ompi; inside /tmp or this
#   repository for MPI=ompi5: the root sees those)
# Environment (defaults): PLACEMENTS="hub4x4-interleaved hub4x4" (files in examples/),
#   SIZES=64K,256K,1M,4M,16M  ITERS=10  BUDGET=3 (seconds of timed iterations per size, at least
#   one iteration)  SEGS="16384 65536 262144"  RATE=100mbit  NAME=ob  PIPECAST_TREE=auto
#   PIPECAST_SEGS="16384 65536"  PIPECAST_WINDOWS=256  CONFIGS="default pipeline chain pipecast raweth"
#   (MPI=ompi5: "default tuned pipecast")  BUILD=1 (0: use what is built)  MPI=ompi (or ompi5)
#   TOPODIR=examples (where the placement files are)  PIPECAST_BIN=target/release/pipecast
#   PIPECAST_MCA="" (more --mca arguments for every pipecast configuration, e.g.
#   "--mca coll_pipecast_pml_below 0", or "-x PIPECAST_LOG=pipecast::comm::multicast=debug" for
#   the multicast configuration's per-broadcast trace)  BCAST_ARGS="" (more mpi_bcast options
#   for every configuration, e.g. "--laps": each iteration's time and each rank's CPU on stderr)
#   STOP_AT=HH:MM:SS (UTC; configurations not started by then are skipped)
#   ROUNDS=1 (the configurations of a placement alternate this many times, one after the
#   other: the table gives each the median round and, with MPI=ompi5, the range over rounds
#   and the worst single iteration)
set -eu
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/pipecast-lab-ompi}
PLACEMENTS=${PLACEMENTS:-"hub4x4-interleaved hub4x4"}
SIZES=${SIZES:-64K,256K,1M,4M,16M}
ITERS=${ITERS:-10}
ROUNDS=${ROUNDS:-1}
BUDGET=${BUDGET:-3}
SEGS=${SEGS:-"16384 65536 262144"}
RATE=${RATE:-100mbit}
NAME=${NAME:-ob}
TREE=${PIPECAST_TREE:-auto}
PIPECAST_SEGS=${PIPECAST_SEGS:-"16384 65536"}
PIPECAST_WINDOWS=${PIPECAST_WINDOWS:-256}
MPI=${MPI:-ompi}
case $MPI in
  ompi) CONFIGS=${CONFIGS:-"default pipeline chain pipecast raweth"}; IN=""; BUILT=ffi/build; LAB_MPI=openmpi ;;
  ompi5) CONFIGS=${CONFIGS:-"default tuned pipecast"}; IN="bench/ompi5.sh run"; BUILT=ffi/build-ompi5; LAB_MPI=ompi5 ;;
  *) echo "MPI=$MPI: ompi or ompi5" >&2; exit 2 ;;
esac
P=${PIPECAST_BIN:-$PWD/target/release/pipecast}
mkdir -p "$OUT"
if [ "${BUILD:-1}" = 1 ]; then
  cargo build --release --locked --bin pipecast --lib >&2
  if [ "$MPI" = ompi5 ]; then bench/ompi5.sh build >&2; else make -C ffi CARGO=true >&2; fi
fi
$IN mpicc -O2 -o "$OUT/mpi_bcast" bench/mpi_bcast.c
trap '"$P" lab down --name $NAME >/dev/null 2>&1 || true' EXIT INT TERM

run() { # PLACEMENT LABEL MPIRUN-ARGS...
  placement=$1; label=$2; shift 2
  if [ -n "${STOP_AT:-}" ] && [ "$(date -u +%H:%M:%S)" \> "$STOP_AT" ]; then
    echo "== $placement $label: skipped, past STOP_AT=$STOP_AT" >&2
    return 0
  fi
  err="$OUT/$placement.$label.err"
  echo "== $placement $label ($(date -u +%T))" >&2
  # 16 ranks on 2 cores: ranks waiting in a barrier yield the CPU, as Open MPI does by itself
  # when it knows a node is oversubscribed (each lab machine has one slot, so it does not).
  case $label in pipecast*|raweth|multicast) set -- "$@" ${PIPECAST_MCA:-} ;; esac
  if ! timeout 600 "$P" lab mpirun --mpi "$LAB_MPI" --name "$NAME" -- --mca mpi_yield_when_idle 1 "$@" \
      "$OUT/mpi_bcast" --sizes "$SIZES" \
      --iters "$ITERS" --budget "$BUDGET" --label "$placement/$label" ${BCAST_ARGS:-} \
      >> "$OUT/results.jsonl" 2> "$err"; then
    echo "   FAILED (see $err)" >&2
  fi
}

for placement in $PLACEMENTS; do
  topo=${TOPODIR:-$PWD/examples}/$placement.json
  "$P" lab up --name "$NAME" --topology "$topo" --rate "$RATE" --lldp-wait 0 >&2
  for round in $(seq "$ROUNDS"); do
  [ "$ROUNDS" = 1 ] || echo "== $placement round $round of $ROUNDS" >&2
  for config in $CONFIGS; do
    case $config in
      default) run "$placement" default ;;
      tuned) run "$placement" tuned --mca coll ^han ;;
      pipeline|chain)
        alg=3; [ "$config" = chain ] && alg=2
        for s in $SEGS; do
          run "$placement" "$config-$s" --mca coll_tuned_use_dynamic_rules 1 \
            --mca coll_tuned_bcast_algorithm $alg --mca coll_tuned_bcast_algorithm_segmentsize "$s"
        done ;;
      pipecast)
        for s in 0 $PIPECAST_SEGS; do
          label=pipecast; [ "$s" = 0 ] || label=pipecast_seg-$s
          run "$placement" "$label" --mca mca_base_component_path "SYS_DEFAULT:$PWD/$BUILT" \
            --mca coll_pipecast_verbose 1 --mca coll_pipecast_topology "$topo" \
            --mca coll_pipecast_profile 100mbit --mca coll_pipecast_tree "$TREE" \
            --mca coll_pipecast_segment_bytes "$s" \
            --mca coll_pipecast_if_include 198.18.0.0/16 --mca coll_pipecast_timeout_ms 30000
          err="$OUT/$placement.$label.err"
          carried=$(grep -h 'MPI_COMM_WORLD: [0-9]* broadcasts by pipecast' "$err" \
            | sed 's/.*: \([0-9]*\) broadcasts by pipecast.*/\1/' | awk '{n += $1} END {print n + 0}')
          echo "   $label carried $carried broadcasts on MPI_COMM_WORLD (sum over ranks)" >&2
          if grep -q 'falling back' "$err"; then
            echo "   WARNING: pipecast fell back (see $err)" >&2
          fi
        done
        for w in $PIPECAST_WINDOWS; do
          label=pipecast_win-$w
          run "$placement" "$label" -x PIPECAST_WINDOW=$w \
            --mca mca_base_component_path "SYS_DEFAULT:$PWD/$BUILT" \
            --mca coll_pipecast_verbose 1 --mca coll_pipecast_topology "$topo" \
            --mca coll_pipecast_profile 100mbit --mca coll_pipecast_tree "$TREE" \
            --mca coll_pipecast_if_include 198.18.0.0/16 --mca coll_pipecast_timeout_ms 30000
          if grep -q 'falling back' "$OUT/$placement.$label.err"; then
            echo "   WARNING: pipecast fell back (see $OUT/$placement.$label.err)" >&2
          fi
        done ;;
      multicast)
        run "$placement" multicast -x PIPECAST_MULTICAST=udp \
          --mca mca_base_component_path "SYS_DEFAULT:$PWD/$BUILT" \
          --mca coll_pipecast_verbose 1 --mca coll_pipecast_topology "$topo" \
          --mca coll_pipecast_profile 100mbit --mca coll_pipecast_tree multicast \
          --mca coll_pipecast_if_include 198.18.0.0/16 --mca coll_pipecast_timeout_ms 30000
        if grep -q 'falling back' "$OUT/$placement.multicast.err"; then
          echo "   WARNING: pipecast fell back (see $OUT/$placement.multicast.err)" >&2
        fi ;;
      raweth)
        run "$placement" raweth --mca mca_base_component_path "SYS_DEFAULT:$PWD/$BUILT" \
          --mca coll_pipecast_verbose 1 --mca coll_pipecast_topology "$topo" \
          --mca coll_pipecast_profile 100mbit --mca coll_pipecast_tree "$TREE" \
          --mca coll_pipecast_transport raweth \
          --mca coll_pipecast_if_include 198.18.0.0/16 --mca coll_pipecast_timeout_ms 30000
        if grep -q 'falling back' "$OUT/$placement.raweth.err"; then
          echo "   WARNING: pipecast fell back (see $OUT/$placement.raweth.err)" >&2
        fi ;;
      *) echo "unknown configuration $config" >&2; exit 2 ;;
    esac
  done
  done
  "$P" lab down --name "$NAME" >&2
done
python3 bench/lab_ompi_table.py "$OUT/results.jsonl"
