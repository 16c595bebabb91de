#!/bin/sh
# The shared-memory link's two ways of fanning a writer's segments out to the other ranks of
# its host (docs/shm.md), side by side: `pipecast bench --local N` with
#   cma    PIPECAST_SHM=cma   every reader copies from the writer's buffer (process_vm_readv)
#   stage  PIPECAST_SHM=ring  the writer copies each chunk once into its staging ring, every
#                             reader copies it out (1 + k copies)
#   auto   PIPECAST_SHM=auto  the default rule (shm::stage_from)
# alternating the configurations ROUNDS times, so that a busy machine weighs on each alike.
# Each run measures one memcpy of the message at rank 0 (`memcpy_us`); the table gives each
# configuration's median over rounds of (broadcast time / that run's memcpy), avg and min, and
# how many copies that is against the issue's goal for N ranks on C cores:
# 1.5 x (N-1)/C memcpys.
#
# Usage: bench/shm_fanout.sh [extra pipecast bench args]
# Environment (defaults): NS="8"  SIZES=1M,4M,16M,64M  ROUNDS=5  TREE=auto
#   CONFIGS="cma stage auto"  BUILD=1 (0: use what is built)  OUT=/tmp/pipecast-shm-fanout
set -eu
cd "$(dirname "$0")/.."
NS=${NS:-8}
SIZES=${SIZES:-1M,4M,16M,64M}
ROUNDS=${ROUNDS:-5}
TREE=${TREE:-auto}
CONFIGS=${CONFIGS:-"cma stage auto"}
OUT=${OUT:-/tmp/pipecast-shm-fanout}
TARGET=${CARGO_TARGET_DIR:-target}
mkdir -p "$OUT"
: > "$OUT/results.jsonl"
[ "${BUILD:-1}" = 1 ] && cargo build --release --locked --bin pipecast >&2
echo "# $(date -u '+%F %T') load $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores" >&2
round=1
while [ "$round" -le "$ROUNDS" ]; do
  for n in $NS; do
    for config in $CONFIGS; do
      case $config in
        cma) shm=cma ;;
        stage) shm=ring ;;
        auto) shm=auto ;;
        *) echo "unknown configuration $config" >&2; exit 2 ;;
      esac
      PIPECAST_SHM=$shm "$TARGET/release/pipecast" bench --local "$n" --sizes "$SIZES" \
        --tree "$TREE" --json "$@" |
        python3 -c 'import json,sys; r=json.load(sys.stdin); r["config"]=sys.argv[1]; print(json.dumps(r))' "$config" \
        >> "$OUT/results.jsonl"
    done
  done
  round=$((round + 1))
done
python3 - "$OUT/results.jsonl" "$(nproc)" <<'EOF'
import json, statistics, sys
cores = int(sys.argv[2])
runs = [json.loads(l) for l in open(sys.argv[1])]
cells = {}
for run in runs:
    for r in run["results"]:
        key = (run["ranks"], r["bytes"], run["config"])
        c = cells.setdefault(key, {"avg": [], "min": [], "ok": True})
        c["avg"].append(r["avg_us"] / r["memcpy_us"])
        c["min"].append(r["min_us"] / r["memcpy_us"])
        c["ok"] &= r["verified"]
configs = list(dict.fromkeys(k[2] for k in cells))
print("# broadcast time / one memcpy of the message in the same run, median over %d rounds: avg (min)"
      % max(len(v["avg"]) for v in cells.values()))
print("%5s %9s %8s" % ("ranks", "bytes", "goal") + "".join("  %16s" % c for c in configs))
for n, b in sorted({(k[0], k[1]) for k in cells}):
    goal = 1.5 * (n - 1) / min(cores, n - 1)
    row = "%5d %9d %8.2f" % (n, b, goal)
    for c in configs:
        v = cells.get((n, b, c))
        row += "  %16s" % ("-" if v is None else "%6.2f (%5.2f)%s" % (
            statistics.median(v["avg"]), statistics.median(v["min"]), "" if v["ok"] else "!"))
    print(row)
if not all(v["ok"] for v in cells.values()):
    sys.exit("verification failed (marked !)")
EOF
