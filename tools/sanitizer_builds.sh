#!/usr/bin/env bash
# The sanitizer builds that `bash tools/setup.sh --test` (and so CI) runs after
# the Release suite; docs/reliability.md explains them.
#   build-asan/  clang-14, ASan + UBSan, -O1, libFuzzer coverage: every library,
#                tool and test, and the fuzz harnesses; the whole ctest suite
#                (fuzz_smoke replays the seed corpora and fuzzes each harness 5 s).
#   build-tsan/  clang-14, ThreadSanitizer, -O1: only the tests whose threads
#                share state (the JIT compiler, the primitive cache, the
#                allocator, the profiler, the data loader), run with
#                OMP_NUM_THREADS=1.
# Without the Python package (KILN_PYTHON=OFF): its tests would need libasan
# preloaded into /usr/bin/python3. Needs the packages setup.sh --test installs.
# KILN_JOBS sets the parallelism (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${KILN_JOBS:-2}"
common=(-DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=Release -DKILN_PYTHON=OFF
        "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -gline-tables-only -DNDEBUG")

echo "== kiln: ASan+UBSan build (build-asan/)"
SECONDS=0
cmake -S . -B build-asan "${common[@]}" -DKILN_SANITIZE=ON -DKILN_FUZZ=ON >/dev/null
cmake --build build-asan -j "$jobs"
echo "kiln: build-asan built in ${SECONDS}s"
SECONDS=0
# detect_leaks: the suite must not leak either. UBSan aborts on the first
# report (-fno-sanitize-recover) with a stack.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="suppressions=$PWD/tools/sanitizers/lsan.supp:print_suppressions=0"
(cd build-asan && ctest --output-on-failure -j "$jobs")
echo "kiln: build-asan tests ran in ${SECONDS}s"
unset ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS

echo "== kiln: ThreadSanitizer build (build-tsan/)"
tsan_tests=(concurrency_test primitive_cache_test compile_cache_test launch_services_test allocator_test profiler_test data_loader_test)
SECONDS=0
# Without precompiled headers (KILN_PCH=OFF, cmake/KilnPch.cmake): a library
# file that forgets a standard or protobuf include fails here rather than
# hiding behind its library's PCH (build-asan/ and build/ use the PCH).
cmake -S . -B build-tsan "${common[@]}" -DKILN_TSAN=ON -DKILN_PCH=OFF >/dev/null
cmake --build build-tsan -j "$jobs" --target "${tsan_tests[@]}"
echo "kiln: build-tsan built in ${SECONDS}s"
SECONDS=0
# oneDNN threads with libgomp, which is not built with TSan: its barriers are
# invisible to TSan and every parallel region would be a false report. One
# OpenMP thread keeps each oneDNN call on its caller's thread, so what TSan
# checks is kiln's own sharing between the test's threads; accesses inside
# the uninstrumented libraries (libgomp, libomp, libdnnl) are not checked
# (ignore_noninstrumented_modules, which libomp asks for).
regex="^($(IFS='|'; echo "${tsan_tests[*]}"))\$"
(cd build-tsan && OMP_NUM_THREADS=1 TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1" \
   ctest --output-on-failure -j "$jobs" -R "$regex")
echo "kiln: build-tsan tests ran in ${SECONDS}s"
