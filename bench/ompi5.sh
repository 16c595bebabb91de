#!/usr/bin/env bash
# Open MPI 5 for the tests and the bench (issue 31): Debian 12 has no Open MPI 5 and Debian 13's
# needs glibc >= 2.38, so this makes (once, cached) a Debian 13 root with Open MPI 5.0.x, builds
# the pipecast coll component for it, and runs commands inside it.
#
#   bench/ompi5.sh root            make the root if it is not made yet; print its path
#   bench/ompi5.sh build [ARGS…]   build ffi/build-ompi5/mca_coll_pipecast.so (and the shim) inside
#                                  the root; ARGS go to `make -C ffi` (PROFILE=, BUILD=, targets)
#   bench/ompi5.sh run CMD ARGS…   run CMD inside the root (this repository, /tmp and /dev/shm are
#                                  at the same paths inside; the working directory is kept)
#   bench/ompi5.sh path            print where the root is (made or not)
#
# The root: `debootstrap --variant=minbase trixie` from the Debian archive plus openmpi-bin,
# libopenmpi-dev, python3-mpi4py, gcc and make (about 1.2 GB, a few minutes with the network).
# It lives in $PIPECAST_OMPI5_ROOT, default ${XDG_CACHE_HOME:-~/.cache}/pipecast/ompi5-root, and is
# ready when it holds .pipecast-ready; a failed attempt leaves nothing behind but its log
# (<root>.log). Needs root (debootstrap, chroot, mounts) and the network to $PIPECAST_DEBIAN_MIRROR
# (default http://deb.debian.org/debian). When the root cannot be made, `root` says why on stderr
# and exits 2.
#
# Pitfalls this handles (issue 31): Debian's 5.0.x headers lack
# opal/mca/threads/pthreads/threads_pthreads_mutex.h, so it is taken from the Debian source
# package (same archive, same version) into /opt/ompi5-extra-include; the PMIx headers are in
# /usr/lib/<arch>/pmix2/include; Debian's mpirun sets mca_base_component_path for the ranks, so a
# component outside Open MPI's own directory loads only with `--mca mca_base_component_path`.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
ROOT=${PIPECAST_OMPI5_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/pipecast/ompi5-root}
MIRROR=${PIPECAST_DEBIAN_MIRROR:-http://deb.debian.org/debian}
PACKAGES=openmpi-bin,libopenmpi-dev,python3-mpi4py,gcc,make,libc6-dev,pkg-config,procps,iproute2,dpkg-dev,xz-utils

die() { echo "ompi5: $*" >&2; exit 2; }

make_root() {
  [ -f "$ROOT/.pipecast-ready" ] && return 0
  [ "$(id -u)" = 0 ] || die "cannot make the Open MPI 5 root: needs root (debootstrap, chroot)"
  command -v debootstrap >/dev/null ||
    { apt-get install -y -qq debootstrap >/dev/null 2>&1 || die "cannot make the Open MPI 5 root: no debootstrap (apt-get install debootstrap)"; }
  mkdir -p "$(dirname "$ROOT")"
  # One maker at a time; the others wait for it and then find the root ready.
  exec 9>"$ROOT.lock"
  flock 9
  [ -f "$ROOT/.pipecast-ready" ] && return 0
  local tmp="$ROOT.partial" log="$ROOT.log"
  rm -rf "$tmp"
  echo "ompi5: making the Debian 13 root with Open MPI 5 in $ROOT (a few minutes; log: $log)" >&2
  if ! (
    set -e
    debootstrap --variant=minbase trixie "$tmp" "$MIRROR"
    printf 'deb %s trixie main\ndeb-src %s trixie main\n' "$MIRROR" "$MIRROR" > "$tmp/etc/apt/sources.list"
    rm -f "$tmp/etc/apt/sources.list.d/debian.sources"
    printf '#!/bin/sh\nexit 101\n' > "$tmp/usr/sbin/policy-rc.d" && chmod +x "$tmp/usr/sbin/policy-rc.d"
    in_root "$tmp" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    in_root "$tmp" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      ${PACKAGES//,/ } || in_root "$tmp" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --fix-broken
    # The header Debian's libopenmpi-dev lacks, from the same version's source.
    in_root "$tmp" sh -ec '
      mkdir -p /opt/ompi5-src && cd /opt/ompi5-src
      apt-get source -qq --download-only openmpi
      orig=$(ls openmpi_*.orig.tar.* | head -n 1)
      mkdir -p /opt/ompi5-extra-include
      tar -xf "$orig" --wildcards --strip-components=1 -C /opt/ompi5-extra-include "*/opal/mca/threads/pthreads/*.h"
      test -f /opt/ompi5-extra-include/opal/mca/threads/pthreads/threads_pthreads_mutex.h
      rm -f openmpi_*.debian.tar.* ./*.dsc
      apt-get clean'
    in_root "$tmp" mpirun --version
  ) >"$log" 2>&1; then
    rm -rf "$tmp"
    tail -n 5 "$log" >&2
    die "cannot make the Open MPI 5 root (no network to $MIRROR?): see $log"
  fi
  rm -rf "$ROOT" && mv "$tmp" "$ROOT"
  touch "$ROOT/.pipecast-ready"
  echo "ompi5: root ready: $ROOT" >&2
}

# Runs "$@" chrooted into root $1, in a private mount namespace (nothing stays mounted), with
# /proc, /sys, /dev, /dev/shm, /tmp and this repository (and the cache holding the root's
# neighbours, e.g. mpi4py's sources) at the same paths. The working directory is kept when it
# exists inside.
in_root() {
  local root=$1; shift
  unshare --mount --propagation private -- sh -ec '
    root=$1; repo=$2; cwd=$3; shift 3
    mount -t proc proc "$root/proc"
    mount --rbind /sys "$root/sys"
    mount --rbind /dev "$root/dev"
    mkdir -p "$root/dev/shm" "$root/tmp" "$root$repo"
    mount --bind /tmp "$root/tmp"
    mount --bind "$repo" "$root$repo"
    for extra in ${PIPECAST_OMPI5_BIND:-}; do
      mkdir -p "$root$extra" && mount --bind "$extra" "$root$extra"
    done
    cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
    if [ -d "$root$cwd" ]; then dir=$cwd; else dir=/; fi
    exec chroot "$root" sh -c "cd \"\$0\" && exec \"\$@\"" "$dir" "$@"
  ' sh "$root" "$here" "$PWD" "$@"
}

case "${1:-}" in
  path) echo "$ROOT" ;;
  root) make_root; echo "$ROOT" ;;
  build)
    # bench/ompi5.sh build [MAKE ARGS…]: `make -C ffi` inside the root with its mpicc (default:
    # the component and the shim into ffi/build-ompi5, against target/release/libpipecast.a,
    # built here first when missing; PROFILE=, TARGET_DIR=, BUILD= and targets as for ffi/).
    shift
    make_root
    if [ $# = 0 ]; then
      [ -f "$here/target/release/libpipecast.a" ] || (cd "$here" && cargo build --release --lib --locked)
      set -- build-ompi5/mca_coll_pipecast.so build-ompi5/libpipecast_preload.so
    fi
    in_root "$ROOT" sh -c 'repo=$1; shift; exec make -C "$repo/ffi" CARGO=true MPICC=mpicc BUILD=build-ompi5 \
      OMPI_EXTRA_CFLAGS="-I/usr/lib/$(gcc -dumpmachine)/pmix2/include -I/opt/ompi5-extra-include" "$@"' \
      sh "$here" "$@" >&2
    ;;
  run) shift; make_root; in_root "$ROOT" "$@" ;;
  *) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 64 ;;
esac
