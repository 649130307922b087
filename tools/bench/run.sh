#!/usr/bin/env bash
# The one command of docs/benchmarks.md: builds kiln (Release, into
# $KILN_BENCH_BUILD_DIR, default build/) when its binary is missing or older
# than the sources, then runs the kiln-vs-PyTorch benchmark with Debian's
# python3, which installs python3-torch and libopenblas0-openmp when missing
# (as root) and rewrites the "Step time against PyTorch" section of
# docs/benchmarks.md and docs/benchmarks_step_time.svg.
#
#   bash tools/bench/run.sh                 # full run (several minutes)
#   bash tools/bench/run.sh --tiny --no_docs  # the smoke test's configuration
#   bash tools/bench/run.sh --only "mlp b64" --threads 1 --no_docs
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${KILN_BENCH_BUILD_DIR:-$repo/build}"
kiln="$build/tools/kiln"
if [[ ! -x "$kiln" ]] || [[ -n "$(find "$repo/framework" "$repo/compiler" "$repo/runtime" "$repo/passes" \
      "$repo/launch_op" "$repo/tools" -newer "$kiln" \( -name '*.cc' -o -name '*.h' -o -name CMakeLists.txt \) \
      -print -quit)" ]]; then
  cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" -j"${KILN_BUILD_JOBS:-1}" --target kiln
fi
python=/usr/bin/python3
if [[ ! -x "$python" ]]; then
  if [[ "$(id -u)" == 0 ]]; then apt-get install -y python3; else echo "run.sh: needs $python (apt-get install python3)" >&2; exit 2; fi
fi
exec "$python" "$repo/tools/bench/bench_vs_pytorch.py" --kiln "$kiln" "$@"
