#!/bin/sh
# Checks that the lab's links behave like seed 000 §3's model: a flow runs at the link rate,
# two flows sharing one directed switch link split it, opposite directions do not contend, and
# a per-link `gbps` in the topology file is honoured. Root only. Usage:
#   bench/lab_links.sh [PIPECAST_BINARY] [RATE]        (default: target/release/pipecast 100mbit)
set -eu
P=${1:-target/release/pipecast}
RATE=${2:-100mbit}
NAME=lk$$
DIR=$(mktemp -d)
trap '"$P" lab down --name $NAME >/dev/null 2>&1 || true; rm -rf "$DIR"' EXIT INT TERM
# s0 is the hub; n0,n3 on s1; n1,n4 on s2; n2 on s0; the s0-s2 link is twice as fast (0.2 Gbit/s
# at the default rate: change it with the rate).
cat > "$DIR/t.json" <<JSON
{"switches": ["s0", "s1", "s2"], "links": [["s0", "s1"], {"a": "s0", "b": "s2", "gbps": 0.2}],
 "machines": [{"name": "n0", "switch": "s1"}, {"name": "n1", "switch": "s2"}, {"name": "n2", "switch": "s0"},
              {"name": "n3", "switch": "s1"}, {"name": "n4", "switch": "s2"}]}
JSON
"$P" lab up --name $NAME --topology "$DIR/t.json" --rate "$RATE" >/dev/null
addr() { echo "198.18.0.$(( ${1#n} + 1 ))"; }
flow() { # SRC DST PORT
  "$P" lab exec --name $NAME "$2" -- "$P" lab tput recv --port "$3" > "$DIR/out.$3" &
  "$P" lab exec --name $NAME "$1" -- "$P" lab tput send --to "$(addr "$2"):$3" --seconds 4 &
}
report() { for p in "$@"; do printf ' %s' "$(cut -d' ' -f1-2 "$DIR/out.$p")"; done; echo; }
printf 'rate %s per link direction\n' "$RATE"
printf '%-52s' "n0->n1 alone (s1->s0->s2):"; flow n0 n1 5001; wait; report 5001
printf '%-52s' "n0->n1 + n3->n4 (both cross s1->s0):"; flow n0 n1 5001; flow n3 n4 5002; wait; report 5001 5002
printf '%-52s' "n0->n1 + n4->n3 (opposite directions):"; flow n0 n1 5001; flow n4 n3 5002; wait; report 5001 5002
printf '%-52s' "n2->n1 + n0->n4 (share s0->s2, twice the rate):"; flow n2 n1 5001; flow n0 n4 5002; wait; report 5001 5002
