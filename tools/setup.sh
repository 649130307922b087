#!/usr/bin/env bash
# Sets kiln up on a Debian machine: installs the missing Debian packages,
# configures a Release build in build/, builds it and installs it (under
# $KILN_PREFIX, default /usr/local as root, none otherwise). Then:
#   bash tools/setup.sh          set up only
#   bash tools/setup.sh --train  set up, then train the MLP on the bundled digits data (JIT on)
#   bash tools/setup.sh --test   set up, then run the whole test suite (ctest), then the
#                                sanitizer builds (docs/reliability.md):
#                                build-asan/ (clang, ASan+UBSan, libFuzzer harnesses): the suite
#                                again; build-tsan/ (ThreadSanitizer): the concurrency tests
# Extra cmake options: KILN_CMAKE_ARGS="-DKILN_SANITIZE=ON" bash tools/setup.sh --test
# KILN_SANITIZER_BUILDS=0 bash tools/setup.sh --test skips the two sanitizer builds.
set -euo pipefail
cd "$(dirname "$0")/.."

mode="${1:-}"
case "$mode" in
  ""|--train|--test) ;;
  *) echo "usage: bash tools/setup.sh [--train|--test]" >&2; exit 2 ;;
esac

packages=(
  build-essential cmake pkg-config
  libdnnl-dev ocl-icd-opencl-dev libxbyak-dev libprotobuf-dev protobuf-compiler
  libboost-graph-dev libgflags-dev libzydis-dev zlib1g-dev libgtest-dev libbenchmark-dev
  dataset-fashion-mnist python3-numpy time nlohmann-json3-dev libssl-dev
  pybind11-dev python3-dev libopenmpi-dev openmpi-bin graphviz libonnx-dev
)
# The PyTorch parity test and the benchmarks' peer, and the browser the
# visual test drives (both tests skip without them).
if [ "$mode" = "--test" ]; then packages+=(python3-torch chromium); fi
# The ONNX importer's tests: ONNX's backend node tests, the onnx Python
# package and torchvision (resnet18 exported from PyTorch).
if [ "$mode" = "--test" ]; then packages+=(python3-onnx libonnx-testdata python3-torchvision); fi
# The sanitizer builds and the fuzz harnesses (clang's ASan/UBSan/TSan
# runtimes and libFuzzer).
if [ "$mode" = "--test" ]; then packages+=(clang-14 libclang-rt-14-dev libfuzzer-14-dev); fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "kiln setup: missing Debian packages. Run as root:" >&2
    echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  echo "kiln setup: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

jobs="${KILN_JOBS:-2}"
# shellcheck disable=SC2086
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release ${KILN_CMAKE_ARGS:-} >/dev/null
if [ "$mode" = "--train" ]; then
  # Training needs the kiln command only (and the Python package, which is
  # installed with it), not the tests.
  targets=(kiln)
  if grep -q '^KILN_PYTHON:BOOL=ON' build/CMakeCache.txt; then targets+=(kiln_python); fi
  cmake --build build -j "$jobs" --target "${targets[@]}"
else
  cmake --build build -j "$jobs"
fi

# Install (cmake --install, docs/usage.md "Install"): under $KILN_PREFIX, or
# /usr/local as root; KILN_PREFIX=0 skips it.
prefix="${KILN_PREFIX:-}"
if [ -z "$prefix" ] && [ "$(id -u)" -eq 0 ]; then prefix=/usr/local; fi
if [ -z "$prefix" ]; then
  echo "kiln setup: not installing (not root): KILN_PREFIX=DIR installs under DIR; ./build/tools/kiln and PYTHONPATH=build/python work without it"
elif [ "$prefix" = 0 ]; then
  echo "kiln setup: not installing (KILN_PREFIX=0)"
else
  cmake --install build --prefix "$prefix" >/dev/null
  site=$(sed -n 's/^KILN_PYTHON_INSTALL_DIR:STRING=//p' build/CMakeCache.txt)
  echo "kiln setup: installed into $prefix: $prefix/bin/kiln${site:+, the Python package in $prefix/$site}, headers and find_package(kiln)"
fi

case "$mode" in
  --train)
    ./build/tools/kiln train --model mlp --dataset digits --epochs 20 --batch_size 32 --lr 0.1 --optimizer momentum \
      --seed 1 --use_jit --metrics_out build/mlp_digits_metrics.json
    ;;
  --test)
    (cd build && ctest --output-on-failure -j "$jobs")
    if [ "${KILN_SANITIZER_BUILDS:-1}" != 0 ]; then bash tools/sanitizer_builds.sh; fi
    ;;
esac
