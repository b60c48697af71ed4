#!/usr/bin/env bash
# Installs the Debian packages sbx needs to build and test. Idempotent and quiet:
# it asks apt only for what is missing.
set -euo pipefail

pkgs=(
  build-essential cmake pkg-config git clang clang-format libclang-rt-14-dev
  patch protobuf-c-compiler libprotobuf-c-dev libcurl4-openssl-dev
  libarchive-dev libseccomp-dev libjansson-dev libcriterion-dev
  libmbedtls-dev libzstd-dev liblz4-dev libacl1-dev nettle-dev libbz2-dev
  liblzma-dev libxml2-dev libicu-dev zlib1g-dev libssl-dev
  zstd tar passwd util-linux procps iproute2 python3 tmux openssl nginx
  passt libmicrohttpd-dev libsqlite3-dev libpq-dev libyaml-dev postgresql prometheus systemd
  nodejs # the MCP servers the tests run (scripts/mcp-servers.sh)
  chromium # the web page's browser tests (tests/web/, scripts/web-test-deps.sh)
)
# The container backend's tests: the engine (podman serving the Docker API,
# on runc), bridge networking, and debootstrap for the offline Debian image;
# catatonit, the init of the pods that `podman kube play` makes for the
# Kubernetes API fixture's Pods (tests/support/kube_api.py).
if [ "${1:-}" = "--containers" ]; then
  pkgs+=(podman runc conmon containernetworking-plugins iptables debootstrap
    curl catatonit)
fi

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages: ${missing[*]}; run as root or install them" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
echo "install-deps: installing ${missing[*]}" >&2
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
