# Sourced by bench/local_ompi.sh and bench/scale_comms.sh (not run on its own): the setup they
# share for one host's Open MPI runs, from the repository's top directory.
#   In:  OUT (output directory), PROG (bench/$PROG.c is compiled to $OUT/$PROG), MPI (ompi, the
#        default, or ompi5: inside bench/ompi5.sh's root), BUILD (1, the default: build the
#        library and the component first; 0: use what is built)
#   Out: $OUT made and $OUT/results.jsonl emptied; IN (the prefix that runs a command with
#        MPI's tools), BUILT (where the component is), ROOT_ARGS (mpirun's options for root
#        and for Open MPI 5), COMPONENT (mpirun's options that load the component, verbose 1)
MPI=${MPI:-ompi}
case $MPI in
  ompi) IN=""; BUILT=ffi/build ;;
  ompi5) IN="bench/ompi5.sh run"; BUILT=ffi/build-ompi5 ;;
  *) echo "MPI=$MPI: ompi or ompi5" >&2; exit 2 ;;
esac
mkdir -p "$OUT"
: > "$OUT/results.jsonl"
if [ "${BUILD:-1}" = 1 ]; then
  cargo build --release --locked --lib >&2
  if [ "$MPI" = ompi5 ]; then bench/ompi5.sh build >&2; else make -C ffi CARGO=true >&2; fi
fi
$IN mpicc -O2 -o "$OUT/$PROG" "bench/$PROG.c"
ROOT_ARGS=""
[ "$(id -u)" = 0 ] && ROOT_ARGS="--allow-run-as-root"
[ "$MPI" = ompi5 ] && ROOT_ARGS="$ROOT_ARGS --bind-to none"
COMPONENT="--mca mca_base_component_path SYS_DEFAULT:$PWD/$BUILT --mca coll_pipecast_verbose 1"
