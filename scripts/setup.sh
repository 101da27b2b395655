#!/usr/bin/env bash
# Installs everything quill needs to build and test from Debian's packages (run as root).
# The CUDA toolkit is optional: without nvcc the CPU backend alone is built.
#   scripts/setup.sh           what building and training need
#   scripts/setup.sh --tests   also what the tests alone need (slurm-wlm and munge: the srun test's one-node cluster)
set -euo pipefail
packages=(build-essential cmake ninja-build ccache nlohmann-json3-dev libyaml-cpp-dev libcli11-dev libfmt-dev
          libspdlog-dev libssl-dev libpcre2-dev libsnappy-dev libzstd-dev libgtest-dev libgmock-dev libopenmpi-dev openmpi-bin
          libprotobuf-dev protobuf-compiler)
[ "${1:-}" = --tests ] && packages+=(slurm-wlm munge)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "quill setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi
