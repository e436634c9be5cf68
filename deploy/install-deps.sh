#!/usr/bin/env bash
# Installs, from Debian 12's own packages, everything shardps needs to build,
# test and run the demo. Idempotent: packages already present are skipped, so
# `make demo` and `make test` can call it every time at the cost of one dpkg
# query. Needs root or sudo only when something is actually missing.
set -euo pipefail

pkgs=(
  build-essential cmake pkg-config
  libuv1-dev libprotobuf-c-dev protobuf-c-compiler
  libcriterion-dev libopenblas-dev zlib1g-dev libinih-dev
  dataset-fashion-mnist iproute2 procps
  # --auth-token-file: HMAC challenge-response
  libsodium-dev
  # make fuzz: clang and its libFuzzer and sanitizer runtimes
  clang libclang-rt-14-dev
  # the servers' /metrics endpoint, experiment plots, JSON checks in tests
  libmicrohttpd-dev gnuplot-nox jq
  # the launcher on a real terminal (it_terminal)
  tmux
  # checking the deploy files without Docker or Kubernetes (it_deploy_files)
  docker-compose yamllint
  # the Python package (python/shardps) and its tests and examples: NumPy,
  # PyTorch and torchvision (Debian's, CPU: the real models of the torch tests,
  # ResNet's BasicBlock); the interpreter is /usr/bin/python3
  python3-numpy python3-torch python3-torchvision
  # make gpu-check-chroot: a bare Debian 12 root to run deploy/gpu-check.sh in
  debootstrap
)

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null; then
    echo "install-deps: need root to install ${missing[*]}; re-run as root or install sudo" >&2
    exit 1
  fi
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
