#!/usr/bin/env bash
# The container engine for the docker backend's tests and benchmarks:
# podman serving the Docker Engine API on a private socket, and sbx's images.
#
#   scripts/containers.sh [start]  install podman, runc and debootstrap if
#                                  missing, write the containers.conf this
#                                  machine needs, start the service, build the
#                                  images; prints the DOCKER_HOST to use
#   scripts/containers.sh server-image SBX
#                                  builds localhost/sbx-server:latest
#                                  (deploy/Containerfile.server) with the
#                                  sbx binary SBX, on the offline base
#   scripts/containers.sh env      prints "export DOCKER_HOST=..." for a shell
#   scripts/containers.sh stop     removes sbx's containers, stops the service
#
# Idempotent and quiet: a rerun reuses the running service, the cached Debian
# rootfs (build-containers/) and podman's layer cache. Where the engine cannot
# start it prints the reason and exits non-zero, so the tests that need it
# fail with that reason instead of skipping.
set -euo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
cache=${SBX_CONTAINERS_CACHE:-$src/build-containers}
rundir=${SBX_PODMAN_RUNDIR:-/run/sbx-podman}
sock=$rundir/podman.sock
pidfile=$rundir/podman.pid
host=unix://$sock
mirror=${SBX_DEBIAN_MIRROR:-http://deb.debian.org/debian}
conf=/etc/containers/containers.conf.d/50-sbx.conf
rootfs_image=localhost/sbx-bookworm-rootfs:latest

die() {
  echo "containers.sh: $*" >&2
  exit 1
}

# True when the pidfile names a live "podman system service" process.
service_pid() {
  local pid
  pid=$(cat "$pidfile" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -q 'podman system service' ||
    return 1
  echo "$pid"
}

ping_engine() {
  [ "$(curl -s -m 2 --unix-socket "$sock" http://d/_ping 2>/dev/null)" = OK ]
}

# Runs "$@" with its output in LOG; on failure shows the log's tail and dies.
quietly() {
  local what=$1 log=$2
  shift 2
  if ! "$@" >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    die "$what failed (log: $log)"
  fi
}

write_conf() {
  # runc, because crun refuses the hybrid cgroup layout of such hosts;
  # cgroupfs, because there is no systemd to delegate to; explicit ulimits,
  # because podman's defaults exceed the hard limits a container host may
  # impose and runc then fails to set them.
  local nofile nproc
  nofile=$(ulimit -Hn)
  nproc=$(ulimit -Hu)
  [ "$nofile" = unlimited ] || [ "$nofile" -gt 65536 ] && nofile=65536
  [ "$nproc" = unlimited ] || [ "$nproc" -gt 16384 ] && nproc=16384
  local want
  want=$(
    cat <<EOF
# Written by sbx's scripts/containers.sh.
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
EOF
  )
  if [ "$(cat "$conf" 2>/dev/null)" != "$want" ]; then
    mkdir -p "$(dirname "$conf")"
    printf '%s\n' "$want" >"$conf.tmp"
    mv "$conf.tmp" "$conf"
  fi
}

# The docker backend asks Podman for a user namespace of its own per
# container (userns "auto"): Podman takes those ranges from the subordinate
# ids of the user "containers", which a fresh host does not have. The range
# is the one podman's documentation suggests: the upper half of the 32-bit
# ids, clear of any host account.
write_subids() {
  local f
  for f in /etc/subuid /etc/subgid; do
    grep -q '^containers:' "$f" 2>/dev/null ||
      echo "containers:2147483647:2147483648" >>"$f"
  done
}

start_service() {
  if service_pid >/dev/null && ping_engine; then
    return 0
  fi
  mkdir -p "$rundir"
  chmod 0700 "$rundir"
  rm -f "$sock"
  mkdir -p "$cache"
  local log=$cache/podman-service.log
  # setsid: the service outlives this script and gets no terminal signals.
  # From /: it outlives the caller's directory too (a test's temp dir or a
  # removed checkout), and conmon fails every start once its cwd is gone.
  (cd / && exec setsid podman system service --time=0 "$host" </dev/null \
    >"$log" 2>&1) &
  echo $! >"$pidfile"
  for _ in $(seq 100); do
    ping_engine && return 0
    if ! service_pid >/dev/null; then
      tail -n 20 "$log" >&2
      die "podman system service exited (log: $log)"
    fi
    sleep 0.1
  done
  tail -n 20 "$log" >&2
  die "podman system service did not answer on $sock within 10 s (log: $log)"
}

stop_service() {
  local pid
  if pid=$(service_pid); then
    # sbx's containers first: they would outlive the service.
    podman ps -aq --filter label=sbx.managed=true 2>/dev/null |
      xargs -r podman rm -f -t 0 >/dev/null 2>&1 || true
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile" "$sock"
}

# A Debian bookworm minbase root filesystem as a tar, made once.
build_rootfs() {
  local tar=$cache/bookworm-minbase.tar
  if [ ! -s "$tar" ]; then
    local dir=$cache/rootfs.tmp
    rm -rf "$dir"
    mkdir -p "$dir"
    quietly "debootstrap of bookworm from $mirror" "$cache/debootstrap.log" \
      timeout 900 debootstrap --variant=minbase \
      --include=git,ca-certificates bookworm "$dir" "$mirror"
    rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
    tar --numeric-owner -C "$dir" -cf "$tar.tmp" .
    mv "$tar.tmp" "$tar"
    rm -rf "$dir"
    podman rmi -f "$rootfs_image" >/dev/null 2>&1 || true
  fi
  if ! podman image exists "$rootfs_image"; then
    quietly "podman import" "$cache/import.log" \
      timeout 300 podman import "$tar" "$rootfs_image"
  fi
}

build_images() {
  local sandboxd=$src/build-static/sandboxd
  quietly "make static" "$cache/static.log" make -C "$src" -s static
  [ -x "$sandboxd" ] || die "make static did not produce $sandboxd"
  local ctx=$cache/context
  mkdir -p "$ctx"
  cmp -s "$sandboxd" "$ctx/sandboxd" || cp "$sandboxd" "$ctx/sandboxd"
  quietly "podman build of sbx-sandboxd" "$cache/build-sandboxd.log" \
    timeout 300 podman build -f "$src/deploy/Containerfile.sandboxd" \
    -t localhost/sbx-sandboxd:latest "$ctx"
  build_rootfs
  quietly "podman build of sbx-debian" "$cache/build-debian.log" \
    timeout 300 podman build -f "$src/deploy/Containerfile.debian" \
    --build-arg BASE="$rootfs_image" -t localhost/sbx-debian:latest "$ctx"
}

# sbx serve's image (deploy/kubernetes/) with the sbx binary $1; a
# sanitizer build brings its runtime libraries.
build_server_image() {
  local sbx=$1 ctx=$cache/server-context extra=
  [ -x "$sbx" ] || die "server-image: no sbx binary at \"$sbx\""
  build_rootfs
  mkdir -p "$ctx"
  cmp -s "$sbx" "$ctx/sbx" || cp "$sbx" "$ctx/sbx"
  local libs
  libs=$(ldd "$sbx")
  if [[ $libs == *libasan* ]]; then
    extra="libasan8 libubsan1 libatomic1 libnsl2"
  fi
  quietly "podman build of sbx-server" "$cache/build-server.log" \
    timeout 600 podman build -f "$src/deploy/Containerfile.server" \
    --build-arg BASE="$rootfs_image" --build-arg EXTRA_PACKAGES="$extra" \
    -t localhost/sbx-server:latest "$ctx"
}

case ${1:-start} in
start)
  mkdir -p "$cache"
  quietly "install-deps --containers" "$cache/install-deps.log" \
    bash "$src/scripts/install-deps.sh" --containers
  [ "$(id -u)" -eq 0 ] || die "the engine runs rootful: run as root"
  write_conf
  write_subids
  start_service
  build_images
  echo "$host"
  ;;
env)
  echo "export DOCKER_HOST=$host"
  ;;
server-image)
  [ $# -eq 2 ] || die "usage: scripts/containers.sh server-image SBX"
  build_server_image "$(realpath "$2")"
  ;;
stop)
  stop_service
  ;;
*)
  echo "usage: scripts/containers.sh [start | env | stop | server-image SBX]" >&2
  exit 2
  ;;
esac
