#!/usr/bin/env bash
# Installs every Debian package sdp needs. Idempotent and non-interactive; run as root or with sudo.
set -euo pipefail
packages=(
  build-essential cmake pkg-config git         # compiler and build
  libopenmpi-dev openmpi-bin                    # the distributed engine
  libopenblas-openmp-dev libdnnl-dev            # GEMM and convolution providers
  ocl-icd-opencl-dev                            # oneDNN's CMake config looks for OpenCL
  zlib1g-dev libcjson-dev                       # .gz datasets, safetensors headers and configs
  libcmocka-dev python3                         # unit tests; the shell tests read JSON with python3
  dataset-fashion-mnist                         # real image data (/usr/share/datasets/fashion-mnist)
  python3-torch python3-numpy                   # the PyTorch oracle (tests/test_torch_oracle.sh)
  clang-format gnuplot-nox                      # style, plots
)
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages already installed"
  exit 0
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
