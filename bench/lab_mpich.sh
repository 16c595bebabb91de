#!/bin/sh
# MPICH's own MPI_Bcast against MPICH + the pipecast LD_PRELOAD shim on the lab (issue 13).
#
# Builds the lab from a placement file at $RATE, then runs bench/mpi_bcast.c (seed 003 Fig. 10
# timing, T(msize) point to point in the same job, every byte checked at every rank) under
# Debian's MPICH through `pipecast lab mpirun --mpi mpich`, one rank per machine, alternating
# ROUNDS times:
#   mpich     PMPI_Bcast (--pmpi): MPICH's own decision, its bytes over UCX's TCP on the lab's
#             eth0 (`lab mpirun --mpi mpich` pins UCX_NET_DEVICES=eth0, UCX_TLS=tcp,self)
#   pipecast  MPI_Bcast through the shim: its defaults (64 KiB to 512 KiB along pipecast's tree
#             over MPI point-to-point, larger ones over pipecast's TCP transport), the
#             placement's topology file, profile 100mbit
# Both jobs load the shim: besides carrying broadcasts it holds the PMI barrier without which
# Debian's MPICH 4.0 (ch4:ucx) hangs in MPI_Finalize now and then (docs/results-mpich.md).
# Output: $OUT/results.jsonl (bench/mpi_bcast.c's lines, label = placement/config/round),
# $OUT/*.err (each job's stderr: the shim's counters), a markdown table on stdout: per size the
# median over rounds of bcast / T(msize) for each, and MPICH's time over pipecast's (> 1:
# pipecast faster). The command line is printed first.
#
# Usage: bench/lab_mpich.sh [OUT_DIR]      (default /tmp/pipecast-lab-mpich; root or not)
# Environment (defaults): PLACEMENT=hub4x4-interleaved (examples/<name>.json)  RATE=100mbit
#   SIZES=64K,1M,4M,16M  ITERS=5  BUDGET=3 (seconds of timed iterations per size)  ROUNDS=1
#   NAME=mh  BUILD=1 (0: use what is built)
set -eu
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/pipecast-lab-mpich}
PLACEMENT=${PLACEMENT:-hub4x4-interleaved}
RATE=${RATE:-100mbit}
SIZES=${SIZES:-64K,1M,4M,16M}
ITERS=${ITERS:-5}
BUDGET=${BUDGET:-3}
ROUNDS=${ROUNDS:-1}
NAME=${NAME:-mh}
TARGET=${CARGO_TARGET_DIR:-$PWD/target}
P=$TARGET/release/pipecast
TOPO=$PWD/examples/$PLACEMENT.json
command -v mpiexec.mpich >/dev/null && command -v mpicc.mpich >/dev/null ||
  { echo "MPICH is not installed (apt-get install mpich libmpich-dev)" >&2; exit 2; }
mkdir -p "$OUT"
: > "$OUT/results.jsonl"
echo "PLACEMENT=$PLACEMENT RATE=$RATE SIZES=$SIZES ITERS=$ITERS BUDGET=$BUDGET ROUNDS=$ROUNDS bench/lab_mpich.sh $OUT"
if [ "${BUILD:-1}" = 1 ]; then
  cargo build --release --locked --bin pipecast --lib >&2
  make -C ffi CARGO=true TARGET_DIR="$TARGET" BUILD="$OUT" "$OUT/libpipecast_preload_mpich.so" >&2
fi
mpicc.mpich -O2 -o "$OUT/mpi_bcast" bench/mpi_bcast.c
trap '"$P" lab down --name $NAME >/dev/null 2>&1 || true' EXIT INT TERM
"$P" lab up --name "$NAME" --topology "$TOPO" --rate "$RATE" --lldp-wait 0 >&2

run() { # LABEL ROUND MPI_BCAST-ARGS...
  label=$1; round=$2; shift 2
  err="$OUT/$label.$round.err"
  echo "== $label round $round ($(date -u +%T))" >&2
  if ! timeout 900 "$P" lab mpirun --name "$NAME" --mpi mpich -- \
      -genv LD_PRELOAD "$OUT/libpipecast_preload_mpich.so" -genv PIPECAST_VERBOSE 1 \
      -genv PIPECAST_TOPOLOGY "$TOPO" -genv PIPECAST_PROFILE 100mbit \
      -genv PIPECAST_TIMEOUT_MS 60000 \
      "$OUT/mpi_bcast" --sizes "$SIZES" --iters "$ITERS" --budget "$BUDGET" \
      --label "$PLACEMENT/$label/$round" "$@" >> "$OUT/results.jsonl" 2> "$err"; then
    echo "   FAILED (see $err)" >&2
    return 0
  fi
  if grep -q 'falling back' "$err"; then echo "   WARNING: pipecast fell back (see $err)" >&2; fi
  carried=$(sed -n 's/.*: \([0-9]*\) broadcasts by pipecast.*/\1/p' "$err" | awk '{n += $1} END {print n + 0}')
  echo "   pipecast carried $carried broadcasts (sum over ranks and communicators)" >&2
}

round=1
while [ "$round" -le "$ROUNDS" ]; do
  run mpich "$round" --pmpi
  run pipecast "$round"
  round=$((round + 1))
done

python3 - "$OUT/results.jsonl" <<'EOF'
import json, statistics, sys
from collections import defaultdict
rows = defaultdict(lambda: defaultdict(list))  # bytes -> config -> [(ratio, bcast_s, p2p_s)]
bad = []
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    _, config, _ = r["label"].split("/")
    if not r["ok"]:
        bad.append(r["label"])
    rows[r["bytes"]][config].append((r["bcast_s"] / r["p2p_s"], r["bcast_s"], r["p2p_s"]))
def human(n):
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"
def med(v, i):
    return statistics.median(x[i] for x in v)
print("| size | T(msize) s | MPICH default / T | pipecast shim / T | MPICH default / pipecast | runs |")
print("|---|---|---|---|---|---|")
for size in sorted(rows):
    m, p = rows[size].get("mpich", []), rows[size].get("pipecast", [])
    if not m or not p:
        continue
    t = statistics.median(x[2] for x in m + p)
    print(f"| {human(size)} | {t:.3f} | {med(m, 0):.2f} | {med(p, 0):.2f} | "
          f"{med(m, 1) / med(p, 1):.2f}x | {len(m)}+{len(p)} |")
if bad:
    print("WRONG DATA in", ", ".join(bad))
    sys.exit(1)
EOF
