#!/bin/sh
# Runs every fuzz target of fuzz/ for a given time (default 300 s each) and prints a markdown
# table of runs, coverage and crashes (docs/fuzzing.md holds the last results).
#
#   bench/fuzz.sh                 # every target, 5 minutes each
#   bench/fuzz.sh 30              # 30 s each
#   bench/fuzz.sh 30 names files  # only these targets
#
# Needs only the stable toolchain and a C++ compiler (libfuzzer-sys builds libFuzzer): the
# targets are built with the stable `-C passes=sancov-module` coverage instrumentation that
# cargo-fuzz also uses, without its nightly-only `-Z sanitizer=address` (Rust code outside
# `unsafe` needs no ASan to find panics, overflows and runaway allocations). `--target` keeps
# the instrumentation out of build scripts. Crashes are written to fuzz/artifacts/TARGET/;
# replay one with `$BIN/TARGET fuzz/artifacts/TARGET/crash-…`.
set -eu
cd "$(dirname "$0")/../fuzz"
SECONDS_EACH=${1:-300}
[ $# -gt 0 ] && shift
TRIPLE=$(rustc -vV | sed -n 's/^host: //p')
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
RUSTFLAGS="-C passes=sancov-module -C llvm-args=-sanitizer-coverage-level=4 \
-C llvm-args=-sanitizer-coverage-inline-8bit-counters -C llvm-args=-sanitizer-coverage-pc-table \
-C llvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -C debug-assertions -C overflow-checks" \
  cargo build --release --locked --target "$TRIPLE" --bins
BIN=$CARGO_TARGET_DIR/$TRIPLE/release
TARGETS=${*:-$(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.toml | grep -v '^pipecast-fuzz$')}

# Longest input per target: text formats well past the 64 KiB where `format!` widths once
# panicked; binary formats past their largest legal frame or blob.
max_len() {
  case $1 in
    files|lldpd_json|lab_state|topo_import) echo 200000 ;;
    names|config) echo 70000 ;;
    bootstrap) echo 16384 ;;
    lldp|frame) echo 10000 ;;
    raweth_rx) echo 20000 ;;
    *) echo 4096 ;;
  esac
}

# Seeds from the repository's own examples.
seed() {
  dir=corpus/$1
  mkdir -p "$dir"
  case $1 in
    files) cp ../tests/data/*.json ../profiles/*.json ../examples/*.json "$dir"/ 2>/dev/null || true ;;
    lldp) cp ../tests/data/lldp/*.bin "$dir"/ 2>/dev/null || true ;;
    names) for s in linear binary kary:3 kbinomial:2 hetero:prune auto tcp raweth:eth0 \
                    02:00:00:00:00:01 64KiB 4M eth0,198.18.0.0/16; do
             printf '%s' "$s" > "$dir/$(printf '%s' "$s" | tr -c 'a-zA-Z0-9' _)"
           done ;;
    raweth_rx) # A 112-byte broadcast in 1000-byte segments; one sealed data frame from rank 0
               # (control 0x18) of 100 + 112 bytes: kind 1, per-peer seq 1, payload 0xab.
               { printf '\020\000\000\000\030\324\000\003\001'; head -c 62 /dev/zero
                 printf '\001'; head -c 35 /dev/zero; head -c 112 /dev/zero | tr '\000' '\253'
               } > "$dir/one_frame" ;;
    topo_import) printf '# rank: group id, switch id, port number\n0: 1 7 -1\n1: 1 10 -1\n2: 2 3 5\n3: 2 3 5\n' > "$dir/coords"
                 printf 'SwitchName=s0 Switches=s[1-2]\nSwitchName=s1 Nodes=n[0-3]\nSwitchName=s2 Nodes=n[4-7]\n' > "$dir/topology.conf" ;;
  esac
}

echo "| target | max_len | seconds | runs | coverage | result |"
echo "|---|---|---|---|---|---|"
status=0
for t in $TARGETS; do
  seed "$t"
  mkdir -p "artifacts/$t"
  log=$(mktemp)
  if "$BIN/$t" "corpus/$t" -max_total_time="$SECONDS_EACH" -max_len="$(max_len "$t")" \
       -artifact_prefix="artifacts/$t/" -print_final_stats=1 >"$log" 2>&1; then
    result="no crash"
  else
    result="CRASH: $(ls -t "artifacts/$t" | head -1)"
    status=1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  echo "| $t | $(max_len "$t") | $SECONDS_EACH | ${runs:-?} | ${cov:-?} | $result |"
  rm -f "$log"
done
exit $status
