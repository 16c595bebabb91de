#!/bin/sh
# Impairs every link of a lab built by `pipecast lab up` for multicast (issue 32;
# docs/multicast.md). This kernel has no netem, so:
#   loss      LOSS % of the UDP frames every switch forwards dropped, per outgoing port (a
#             receiver loses its own; a loss on a switch link is a whole side's): nftables,
#             bridge forward hook, `numgen random`;
#   dup       DUP % of the UDP frames entering every switch port sent again through the
#             bridge (nftables netdev ingress, `dup to br0`);
#   reorder   REORDER % of the UDP frames leaving every shaped interface (every link
#             direction: hosts' eth0 and switch ports) held back in a 2 Mbit/s class while
#             the others pass: a classic-BPF classifier (`ld rand`, as no netem) under each
#             link's own tbf picks them, an HTB child of the tbf delays them (by 6-15 ms at a
#             100 Mbit/s stream's 1 %: tens to a hundred frames overtake each one).
# TCP is not impaired (the point-to-point reference T(m) stays the lab's clean link), unless
# TCP_LOSS (percent, default 0) says so: that many of the TCP segments every switch forwards
# dropped too, per outgoing port (the trees', the barrier's and T(m)'s; docs/multicast.md, "TCP's
# minimum RTO on a LAN").
# Root only. Usage: bench/mcast_impair.sh LAB [LOSS DUP REORDER]   (percent, default 1 1 1)
# Environment: LIMIT, the queue of every link direction in bytes (262144, the lab's at 100 Mbit/s).
#                   bench/mcast_impair.sh LAB off                  (removes it all)
set -eu
LAB=$1
LOSS=${2:-1}
DUP=${3:-1}
REORDER=${4:-1}
TCP_LOSS=${TCP_LOSS:-0}
if [ "$LOSS" = off ]; then LOSS=0 DUP=0 REORDER=0 TCP_LOSS=0; fi

# ldh [12]; jeq IPv4 else no; ldb [23]; jeq UDP else no; ld rand; jge THRESHOLD no; ret -1; ret 0
threshold=$(python3 -c "print(int($REORDER / 100 * 2**32))")
bpf="8,40 0 0 12,21 0 5 2048,48 0 0 23,21 0 3 17,32 0 0 4294963256,53 1 0 $threshold,6 0 0 4294967295,6 0 0 0"

for ns in $(ip netns list | cut -d' ' -f1 | grep "^$LAB-"); do
  case $ns in "$LAB-mg") continue ;; esac
  # Every interface shaped by the lab's tbf: one direction of a data link.
  ip netns exec "$ns" tc qdisc show | while read -r _ kind handle _ dev _; do
    [ "$kind" = tbf ] || continue
    ip netns exec "$ns" tc qdisc del dev "$dev" parent "${handle}1" 2>/dev/null || true
    if [ "$REORDER" = 0 ]; then
      # A deleted child leaves the tbf a noop qdisc, which drops everything: the link's
      # own queue back (LIMIT bytes, as the lab's tbf had).
      ip netns exec "$ns" tc qdisc add dev "$dev" parent "${handle}1" bfifo limit "${LIMIT:-262144}"
      continue
    fi
    ip netns exec "$ns" tc qdisc add dev "$dev" parent "${handle}1" handle 32: htb default 1
    ip netns exec "$ns" tc class add dev "$dev" parent 32: classid 32:1 htb rate 10gbit 2>/dev/null
    ip netns exec "$ns" tc class add dev "$dev" parent 32: classid 32:2 htb rate 2mbit ceil 2mbit \
      burst 1600 cburst 1600
    ip netns exec "$ns" tc filter add dev "$dev" parent 32: protocol all prio 1 bpf \
      bytecode "$bpf" classid 32:2
    # The link's queue stays what the lab gave its tbf (LIMIT bytes; lab::tbf_sizes: 262144
    # at 100 Mbit/s): a longer one would only add delay.
    for leaf in 1 2; do
      ip netns exec "$ns" tc qdisc add dev "$dev" parent 32:$leaf bfifo limit "${LIMIT:-262144}"
    done
  done
  # Switches: loss when forwarding, duplicates at ingress.
  ip -n "$ns" link show br0 >/dev/null 2>&1 || continue
  ip netns exec "$ns" nft delete table bridge pcmloss 2>/dev/null || true
  ip netns exec "$ns" nft delete table netdev pcmdup 2>/dev/null || true
  [ "$LOSS" = 0 ] && [ "$DUP" = 0 ] && [ "$TCP_LOSS" = 0 ] && continue
  rules="table bridge pcmloss {
 chain lossy {
  type filter hook forward priority 0; policy accept;
  meta l4proto udp numgen random mod 10000 < $(python3 -c "print(round($LOSS * 100))") counter drop
  meta l4proto tcp numgen random mod 10000 < $(python3 -c "print(round($TCP_LOSS * 100))") counter drop
 }
}
table netdev pcmdup {"
  for port in $(ip -n "$ns" -o link show master br0 | sed 's/^[0-9]*: \([^@:]*\).*/\1/'); do
    rules="$rules
 chain in_$port {
  type filter hook ingress device \"$port\" priority 0; policy accept;
  meta l4proto udp numgen random mod 10000 < $(python3 -c "print(round($DUP * 100))") counter dup to \"br0\"
 }"
  done
  printf '%s\n}\n' "$rules" | ip netns exec "$ns" nft -f -
done
echo "impaired $LAB: loss $LOSS %, duplicates $DUP %, reordered $REORDER % (UDP); TCP loss $TCP_LOSS %"
