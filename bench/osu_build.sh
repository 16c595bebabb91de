#!/bin/sh
# Builds OSU Micro-Benchmarks' osu_bcast and osu_ibcast (and the utility files they need) from
# OSU's public source against one MPI, in a directory outside the repository, and prints the
# two binaries' paths on stdout (osu_bcast, then osu_ibcast; everything else goes to stderr).
# The project ships none of OSU's code: this script fetches or copies it into the build
# directory, never into the repository.
#
# The source (OSU_SRC):
#   unset             the official release tarball, OSU_URL (pinned: OSU_VERSION 7.3 from
#                     mvapich.cse.ohio-state.edu), checked against OSU_SHA256 (the sha256 Spack
#                     pins for that release) before it is unpacked
#   a directory       an unpacked OSU source tree, or a git repository (a bare one or a work
#                     tree: OSU_REV, default HEAD, is taken with `git archive`)
#   a file            a tarball (.tar.gz, .tgz, .tar.bz2, .tar.xz); with OSU_SHA256 set, checked
#   a URL             a tarball's (downloaded; checked when OSU_SHA256 is set) or a git
#                     repository's (cloned; OSU_REV a branch or tag)
# Layouts: OSU 5.x (mpi/collective/), 6.x (c/mpi/collective/ + c/util/) and 7.x
# (c/mpi/collective/blocking|non_blocking/ + c/util/). With OSU's configure in the source, it
# runs `./configure CC=$MPICC CXX=$MPICXX` and makes only the two programs; without one (or when
# that fails), it compiles each benchmark and OSU's MPI utility files with $MPICC directly.
#
# A finished build is reused: the build directory keeps a stamp of the source and the MPI, and
# the same two again print the same paths without building (REBUILD=1 builds anew).
#
# Usage: bench/osu_build.sh [BUILD_DIR]   (default /tmp/pipecast-osu-build/<mpi>, e.g.
#        openmpi-4.1.4 or mpich-4.0.2, after what MPICC says it is)
# Environment: MPICC=mpicc (MPICC=mpicc.mpich for MPICH)  MPICXX (mpicc's name with mpicxx)
#   OSU_SRC  OSU_REV=HEAD  OSU_VERSION=7.3  OSU_URL  OSU_SHA256  REBUILD=0
# Example: OSU_SRC=/path/to/osu-micro-benchmarks.git sh bench/osu_build.sh
set -eu
REPO=$(cd "$(dirname "$0")/.." && pwd -P)
die() { echo "osu_build.sh: $*" >&2; exit 2; }

MPICC=${MPICC:-mpicc}
command -v "$MPICC" >/dev/null 2>&1 || die "MPICC=$MPICC: no such command (MPICC=mpicc.mpich for MPICH)"
MPICXX=${MPICXX:-$(echo "$MPICC" | sed 's/mpicc/mpicxx/')}
# Which MPI: Open MPI's wrapper answers --showme:version, MPICH's -v.
if ver=$("$MPICC" --showme:version 2>/dev/null) && echo "$ver" | grep -q 'Open MPI'; then
  mpi=openmpi-$(echo "$ver" | sed -n 's/.*Open MPI \([0-9][0-9.a-z]*\).*/\1/p')
elif ver=$("$MPICC" -v 2>&1 | head -1) && echo "$ver" | grep -q MPICH; then
  mpi=mpich-$(echo "$ver" | sed -n 's/.*version \([0-9][0-9.a-z]*\).*/\1/p')
else
  mpi=$(basename "$MPICC")
fi

OSU_VERSION=${OSU_VERSION:-7.3}
if [ -z "${OSU_SRC:-}" ]; then
  OSU_URL=${OSU_URL:-https://mvapich.cse.ohio-state.edu/download/mvapich/osu-micro-benchmarks-$OSU_VERSION.tar.gz}
  # Spack's pin for osu-micro-benchmarks 7.3 (var/spack/repos/builtin/packages/osu-micro-benchmarks).
  if [ "$OSU_VERSION" = 7.3 ]; then
    OSU_SHA256=${OSU_SHA256:-8fa25b8aaa34e4b07ab3a4f30b7690ab46b038b08d204a853a9b6aa7bdb02f2f}
  fi
  [ -n "${OSU_SHA256:-}" ] || die "OSU_VERSION=$OSU_VERSION has no pinned checksum: set OSU_SHA256 (or OSU_SRC)"
fi
OSU_REV=${OSU_REV:-HEAD}

outside() { # DIR: refused when it is in the repository
  case $1/ in "$REPO"/*) die "the build directory $1 is inside the repository: give one outside it" ;; esac
}
# The build directory, absolute, its links resolved as far as it exists (before it is made).
DIR=${1:-/tmp/pipecast-osu-build/$mpi}
there=$DIR rest=""
while [ ! -d "$there" ]; do rest=/$(basename "$there")$rest; there=$(dirname "$there"); done
DIR=$(cd "$there" && pwd -P)$rest
outside "$DIR"
mkdir -p "$DIR"

stamp="src=${OSU_SRC:-$OSU_URL} rev=$OSU_REV sha256=${OSU_SHA256:-} mpicc=$(command -v "$MPICC") $ver"
# Reused: a build of the same source with the same MPI, or with OSU_SRC unset, any finished
# build in the directory (built before from a given OSU_SRC, where the release cannot be
# downloaded).
if [ "${REBUILD:-0}" != 1 ] && [ -x "$DIR/bin/osu_bcast" ] && [ -x "$DIR/bin/osu_ibcast" ] &&
    { [ "$(cat "$DIR/stamp" 2>/dev/null)" = "$stamp" ] || { [ -z "${OSU_SRC:-}" ] && [ -f "$DIR/stamp" ]; }; }; then
  echo "osu_build.sh: reusing the build in $DIR ($(cat "$DIR/version" 2>/dev/null))" >&2
  echo "$DIR/bin/osu_bcast"
  echo "$DIR/bin/osu_ibcast"
  exit 0
fi
# Built in $W; what an earlier build left stays until this one has succeeded.
W=$DIR/work
rm -rf "$W"
mkdir -p "$W/src" "$W/bin" "$W/get"

download() { # URL FILE
  if command -v curl >/dev/null 2>&1; then
    curl -fsSL --connect-timeout 20 --max-time 300 -o "$2" "$1"
  elif command -v wget >/dev/null 2>&1; then
    wget -q -T 20 -O "$2" "$1"
  else
    echo "neither curl nor wget" >&2
    return 1
  fi
}
check_sum() { # FILE
  [ -n "${OSU_SHA256:-}" ] || return 0
  got=$(sha256sum "$1" | cut -d' ' -f1)
  [ "$got" = "$OSU_SHA256" ] || die "$1: sha256 $got, expected OSU_SHA256=$OSU_SHA256"
}
unpack() { # TARBALL: its files into $DIR/src, without the top directory
  tar -xf "$1" -C "$W/get" || die "$1: not a tarball tar can unpack"
  top=$(find "$W/get" -mindepth 1 -maxdepth 1)
  if [ "$(echo "$top" | wc -l)" = 1 ] && [ -d "$top" ]; then
    cp -R "$top"/. "$W/src"
  else
    cp -R "$W/get"/. "$W/src"
  fi
}
from_git() { # GIT-DIR
  git --git-dir="$1" archive --format=tar "$OSU_REV" | tar -xf - -C "$W/src" ||
    die "OSU_SRC=$OSU_SRC: git archive $OSU_REV failed"
}

src=${OSU_SRC:-}
case $src in
  '')
    echo "osu_build.sh: downloading $OSU_URL" >&2
    download "$OSU_URL" "$W/get.tar.gz" ||
      die "cannot download $OSU_URL (no network here?). Set OSU_SRC to OSU's source: a directory, a tarball, or a git directory or URL (e.g. OSU_SRC=/path/to/osu-micro-benchmarks-$OSU_VERSION.tar.gz)"
    check_sum "$W/get.tar.gz"
    unpack "$W/get.tar.gz" ;;
  *://*.tar.gz | *://*.tgz | *://*.tar.bz2 | *://*.tar.xz)
    download "$src" "$W/get.tar" || die "cannot download OSU_SRC=$src"
    check_sum "$W/get.tar"
    unpack "$W/get.tar" ;;
  *://* | git@*)
    branch=""
    [ "$OSU_REV" = HEAD ] || branch="--branch $OSU_REV"
    # shellcheck disable=SC2086
    git clone -q --depth 1 $branch "$src" "$W/get/repo" ||
      die "cannot clone OSU_SRC=$src"
    from_git "$W/get/repo/.git" ;;
  *)
    [ -e "$src" ] || die "OSU_SRC=$src: no such file or directory (a directory, a tarball, or a git directory or URL)"
    if [ -f "$src" ]; then
      check_sum "$src"
      unpack "$src"
    elif git --git-dir="$src" rev-parse --verify -q "$OSU_REV^{commit}" >/dev/null 2>&1; then
      from_git "$src"
    elif [ -d "$src/.git" ] && [ ! -f "$src/configure" ] && [ ! -f "$src/configure.ac" ]; then
      from_git "$src/.git"
    else
      cp -R "$src"/. "$W/src"
    fi ;;
esac
rm -rf "$W/get" "$W/get.tar.gz" "$W/get.tar"

S=$W/src
bcast_c=$(find "$S" -path '*mpi/collective*' -name osu_bcast.c | head -1)
ibcast_c=$(find "$S" -path '*mpi/collective*' -name osu_ibcast.c | head -1)
[ -n "$bcast_c" ] && [ -n "$ibcast_c" ] ||
  die "OSU_SRC=${OSU_SRC:-$OSU_URL}: no mpi/collective/osu_bcast.c and osu_ibcast.c in it (not OSU Micro-Benchmarks?)"
version=$(sed -n 's/^AC_INIT(\[OSU-Micro-Benchmarks\], *\[\([^]]*\)\].*/\1/p' "$S/configure.ac" 2>/dev/null || true)
echo "OSU Micro-Benchmarks ${version:-(version unknown)}, $ver" > "$W/version"
echo "osu_build.sh: building $(cat "$W/version") in $DIR" >&2

# The directory with a Makefile that owns SOURCE's program, and the program's path from there
# (7.x: c/mpi/collective/blocking/osu_bcast from c/mpi/collective, or blocking's own Makefile).
make_one() { # SOURCE.c NAME
  d=$(dirname "$1"); rel=$2
  while [ ! -f "$d/Makefile" ] && [ "$d" != "$S" ]; do
    rel=$(basename "$d")/$rel
    d=$(dirname "$d")
  done
  [ -f "$d/Makefile" ] && make -C "$d" "$rel" >> "$W/build.log" 2>&1 && cp "$d/$rel" "$W/bin/$2"
}
# Without configure: OSU's MPI utility files (5.3: osu_coll.c beside the benchmark; later:
# util/osu_util*.c, less the NCCL and PGAS ones), compiled in with the benchmark.
compile_one() { # SOURCE.c NAME
  d=$(dirname "$1")
  util=""
  for u in "$S/c/util" "$S/util" "$d"; do
    [ -f "$u/osu_util.c" ] || [ -f "$u/osu_coll.c" ] || continue
    util=$(find "$u" -maxdepth 1 \( -name 'osu_util*.c' -o -name osu_coll.c \) \
      ! -name '*nccl*' ! -name '*pgas*' | sort | tr '\n' ' ')
    inc=$u
    break
  done
  [ -n "$util" ] || { echo "no OSU utility files found for $1" >&2; return 1; }
  # shellcheck disable=SC2086
  "$MPICC" -O2 -I"$inc" -DPACKAGE_VERSION="\"${version:-unknown}\"" -o "$W/bin/$2" "$1" $util -lm \
    >> "$W/build.log" 2>&1
}

: > "$W/build.log"
built=0
if [ -x "$S/configure" ]; then
  # The generated files newer than their inputs, so that make does not call automake.
  (cd "$S" && touch aclocal.m4 2>/dev/null; sleep 1; touch configure; sleep 1
   find . \( -name Makefile.in -o -name 'config.h.in' \) -exec touch {} +) || true
  if (cd "$S" && ./configure CC="$MPICC" CXX="$MPICXX" > "$W/configure.log" 2>&1); then
    if make_one "$bcast_c" osu_bcast && make_one "$ibcast_c" osu_ibcast; then
      built=1
    else
      echo "osu_build.sh: make failed (see $W/build.log); compiling with $MPICC directly" >&2
    fi
  else
    echo "osu_build.sh: configure failed (see $W/configure.log); compiling with $MPICC directly" >&2
  fi
fi
if [ "$built" = 0 ]; then
  compile_one "$bcast_c" osu_bcast && compile_one "$ibcast_c" osu_ibcast ||
    die "building osu_bcast and osu_ibcast with $MPICC failed: see $W/build.log"
fi
echo "$stamp" > "$W/stamp"
rm -rf "$DIR/src" "$DIR/bin" "$DIR/get" "$DIR"/*.log "$DIR/stamp" "$DIR/version"
mv "$W"/* "$DIR"/
rmdir "$W"
echo "$DIR/bin/osu_bcast"
echo "$DIR/bin/osu_ibcast"
