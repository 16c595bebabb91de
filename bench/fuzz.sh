#!/bin/sh
# Runs every fuzz target of fuzz/ for a given time (default 300 s each), each from its seeds
# (fuzz/seeds/TARGET/) and its working corpus (fuzz/corpus/TARGET/, kept between runs; remove
# it to start from the seeds alone), and prints a markdown table of runs, coverage and crashes
# (docs/fuzzing.md holds the last results).
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
    mcast_frame) echo 10000 ;;
    *) echo 4096 ;;
  esac
}

# Seeds: fuzz/seeds/TARGET/, valid inputs made by the library's own encoders and checked by
# tests/fuzz_seeds.rs (they get the fuzzer past magic numbers, versions and checksums), and for
# the text formats the repository's own files, copied into the working corpus here.
seed() {
  dir=corpus/$1
  mkdir -p "$dir"
  case $1 in
    files) cp ../tests/data/*.json ../profiles/*.json ../examples/*.json "$dir"/ 2>/dev/null || true ;;
    lldp) cp ../tests/data/lldp/*.bin "$dir"/ 2>/dev/null || true ;;
  esac
}

echo "| target | max_len | seconds | runs | seed coverage | coverage | corpus | result |"
echo "|---|---|---|---|---|---|---|---|"
status=0
for t in $TARGETS; do
  seed "$t"
  mkdir -p "artifacts/$t"
  log=$(mktemp)
  seeds=
  [ -d "seeds/$t" ] && seeds=seeds/$t
  # New inputs go to the first directory, corpus/TARGET; seeds/TARGET is only read.
  # shellcheck disable=SC2086
  if "$BIN/$t" "corpus/$t" $seeds -max_total_time="$SECONDS_EACH" -max_len="$(max_len "$t")" \
       -artifact_prefix="artifacts/$t/" -print_final_stats=1 >"$log" 2>&1; then
    result="no crash"
  else
    result="CRASH: $(ls -t "artifacts/$t" | head -1)"
    status=1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  # Coverage once the seeds and the corpus so far are loaded, before any mutation.
  inited=$(grep 'INITED' "$log" | grep -o 'cov: [0-9]*' | head -1 | cut -d' ' -f2)
  corpus=$(find "corpus/$t" -type f | wc -l)
  echo "| $t | $(max_len "$t") | $SECONDS_EACH | ${runs:-?} | ${inited:-?} | ${cov:-?} | $corpus | $result |"
  rm -f "$log"
done
exit $status
