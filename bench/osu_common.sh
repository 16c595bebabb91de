# Sourced by bench/osu_local.sh and bench/lab_osu.sh (not run on its own), from the repository's
# top directory: what their runs of OSU's benchmarks share.
#
# osu_defaults MIN MAX ITERS WARMUP ROUNDS CONFIGS
#   each of those variables' default, where the environment does not set it.
# osu_programs NAMES   (bcast, or "bcast ibcast")
#   OSU_BCAST (and OSU_IBCAST) set to an executable: the one given, or else built by
#   bench/osu_build.sh from OSU's source (OSU_SRC; MPICC; the build directory OSU_BUILD_DIR,
#   default bench/osu_build.sh's), under LOCK when it is set. A finished build is reused.
# osu_pipecast
#   with BUILD=1 (the default) the library, `pipecast` and the Open MPI component built first
#   (into CARGO_TARGET_DIR when set), under LOCK when it is set; BUILD=0: use what is built.
# osu_rows PREFIX
#   OSU's table on stdin (a rank's "[rN] " prefix dropped) as JSON lines {PREFIX,"bytes":…,…},
#   one a size, with the columns the table's header names: osu_bcast's avg_us min_us max_us
#   iters; osu_ibcast's overall_us compute_us init_us test_us wait_us pure_us (min_comm_us
#   max_comm_us from OSU 6) overlap_pct.

osu_defaults() {
  MIN=${MIN:-$1} MAX=${MAX:-$2} ITERS=${ITERS:-$3} WARMUP=${WARMUP:-$4} ROUNDS=${ROUNDS:-$5}
  CONFIGS=${CONFIGS:-$6}
}

osu_programs() {
  osu_need_i=0
  case " $1 " in *" ibcast "*) osu_need_i=1 ;; esac
  if [ -z "${OSU_BCAST:-}" ] || { [ "$osu_need_i" = 1 ] && [ -z "${OSU_IBCAST:-}" ]; }; then
    osu_built=$(${LOCK:+flock "$LOCK"} sh bench/osu_build.sh ${OSU_BUILD_DIR:+"$OSU_BUILD_DIR"}) || {
      echo "no OSU benchmarks: set OSU_BCAST (and OSU_IBCAST) to built ones, or OSU_SRC to OSU's" \
        "source for bench/osu_build.sh" >&2
      exit 2
    }
    OSU_BCAST=${OSU_BCAST:-$(echo "$osu_built" | sed -n 1p)}
    OSU_IBCAST=${OSU_IBCAST:-$(echo "$osu_built" | sed -n 2p)}
  fi
  for osu in "$OSU_BCAST" ${OSU_IBCAST:+"$OSU_IBCAST"}; do
    [ -x "$osu" ] || { echo "$osu is not an executable" >&2; exit 2; }
  done
}

osu_pipecast() {
  [ "${BUILD:-1}" = 1 ] || return 0
  ${LOCK:+flock "$LOCK"} cargo build --release --locked --bin pipecast --lib >&2
  ${LOCK:+flock "$LOCK"} make -C ffi CARGO=true TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}" >&2
}

osu_rows() {
  sed 's/^\[r[0-9]*\] //' | awk -v pre="$1" '
    BEGIN {
      key["Avg Latency(us)"] = "avg_us"; key["Min Latency(us)"] = "min_us"
      key["Max Latency(us)"] = "max_us"; key["Iterations"] = "iters"
      key["Overall(us)"] = "overall_us"; key["Compute(us)"] = "compute_us"
      key["Coll. Init(us)"] = "init_us"; key["MPI_Test(us)"] = "test_us"
      key["MPI_Wait(us)"] = "wait_us"; key["Pure Comm.(us)"] = "pure_us"
      key["Min Comm.(us)"] = "min_comm_us"; key["Max Comm.(us)"] = "max_comm_us"
      key["Overlap(%)"] = "overlap_pct"
    }
    /^# Size/ { h = $0; sub(/^# */, "", h); n = split(h, col, /  +/); next }
    n > 0 && $1 ~ /^[0-9]+$/ && NF == n {
      line = "{" pre ",\"bytes\":" $1
      for (i = 2; i <= n; i++) if (col[i] in key) line = line ",\"" key[col[i]] "\":" $i
      print line "}"
    }'
}
