#!/bin/sh
# Peak descriptors of rank 0 and of the last rank of a local job (docs/scale.md, "Rendezvous").
#   sh bench/fd_peak.sh PIPECAST_BINARY P [more bench options]
# runs `PIPECAST_SHM=off PIPECAST_BINARY bench --local P --sizes 64K --tree linear --iters 2`
# over TCP loopback and samples /proc/PID/fd of every rank every 20 ms (a rank is a child of the
# launcher whose environment has PIPECAST_RANK). Prints P, the launcher's exit code and the two
# peaks; the bench's own output goes to ${OUT:-/tmp/fd_peak.P.out}.
set -u
BIN=$1
P=$2
shift 2
OUT=${OUT:-/tmp/fd_peak.$P.out}
PIPECAST_SHM=off "$BIN" bench --local "$P" --sizes 64K --tree linear --iters 2 "$@" >"$OUT" 2>&1 &
B=$!
p0=0
pl=0
while kill -0 "$B" 2>/dev/null; do
    for pid in $(pgrep -P "$B"); do
        r=$( (tr '\0' '\n' <"/proc/$pid/environ") 2>/dev/null | sed -n 's/^PIPECAST_RANK=//p')
        n=$(ls "/proc/$pid/fd" 2>/dev/null | wc -l)
        if [ "$r" = 0 ] && [ "$n" -gt "$p0" ]; then p0=$n; fi
        if [ "$r" = $((P - 1)) ] && [ "$n" -gt "$pl" ]; then pl=$n; fi
    done
    sleep 0.02
done
wait "$B"
echo "P=$P rc=$? rank0_peak_fds=$p0 rank$((P - 1))_peak_fds=$pl"
