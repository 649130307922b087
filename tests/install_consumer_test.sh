#!/usr/bin/env bash
# install_consumer: `cmake --install` into a temporary prefix, then what an
# installed kiln promises: examples/cpp_consumer configures with
# find_package(kiln), builds and runs; PREFIX/bin/kiln runs; `import kiln`
# loads the installed package (from another directory, with only that
# prefix's site dir on PYTHONPATH).
# usage: install_consumer_test.sh BUILD_DIR SOURCE_DIR PYTHON PYTHON_SITE_REL [CXX_LAUNCHER]
set -euo pipefail
build=$1 src=$2 python=$3 site_rel=$4 launcher=${5:-}
prefix=$(mktemp -d /tmp/kiln-install-test.XXXXXX)
trap 'rm -rf "$prefix"' EXIT

cmake --install "$build" --prefix "$prefix" >/dev/null
for f in bin/kiln lib/cmake/kiln/kilnConfig.cmake include/kiln/framework/executor.h \
         include/kiln/framework/proto/framework.pb.h share/kiln/digits.csv.gz; do
  [ -f "$prefix/$f" ] || { echo "install_consumer: $prefix/$f is missing" >&2; exit 1; }
done

args=(-DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release)
if [ -n "$launcher" ]; then args+=(-DCMAKE_CXX_COMPILER_LAUNCHER="$launcher"); fi
cmake -S "$src/examples/cpp_consumer" -B "$prefix/consumer" "${args[@]}" >/dev/null
cmake --build "$prefix/consumer" -j 2 >/dev/null
"$prefix/consumer/relu_mean"

help=$("$prefix/bin/kiln" --help)
echo "${help%%$'\n'*}"

if [ -n "$site_rel" ]; then
  cd /tmp
  where=$(PYTHONPATH="$prefix/$site_rel" "$python" -c 'import kiln; print(kiln.__file__)')
  echo "import kiln: $where"
  case "$where" in
    "$prefix/$site_rel/kiln/"*) ;;
    *) echo "install_consumer: imported kiln from $where, not from $prefix" >&2; exit 1 ;;
  esac
fi
echo "install_consumer: ok"
