#!/usr/bin/env bash
# The fuzz_smoke ctest: replays each harness's seed corpus
# (tests/fuzz/corpus/<harness>/) and, in a libFuzzer build (--seconds > 0),
# fuzzes each harness for that many seconds from a copy of its corpus.
#   fuzz_smoke.sh --corpus DIR --seconds N HARNESS_BINARY...
# Crash inputs go to $TMPDIR, never into the source tree.
set -euo pipefail
corpus=""
seconds=0
while [ $# -gt 0 ]; do
  case "$1" in
    --corpus) corpus="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    *) break ;;
  esac
done
[ -n "$corpus" ] && [ $# -gt 0 ] || { echo "usage: fuzz_smoke.sh --corpus DIR --seconds N HARNESS..." >&2; exit 2; }
work="$(mktemp -d "${TMPDIR:-/tmp}/kiln-fuzz-smoke-XXXXXX")"
trap 'rm -rf "$work"' EXIT
passed=0
failed=0
for exe in "$@"; do
  name="$(basename "$exe")"
  seeds="$corpus/$name"
  if ! "$exe" -runs=0 -artifact_prefix="$work/" "$seeds" >"$work/$name.replay.log" 2>&1; then
    echo "FAIL $name: replaying $seeds"; tail -n 30 "$work/$name.replay.log"; failed=$((failed + 1)); continue
  fi
  echo "ok   $name: replayed $(find "$seeds" -type f | wc -l) seeds"
  if [ "$seconds" -gt 0 ]; then
    mkdir -p "$work/$name"
    cp "$seeds"/* "$work/$name/"
    if ! "$exe" -max_total_time="$seconds" -timeout=60 -rss_limit_mb=4096 -max_len=8192 \
        -artifact_prefix="$work/" "$work/$name" >"$work/$name.fuzz.log" 2>&1; then
      echo "FAIL $name: fuzzing found a crash"; tail -n 40 "$work/$name.fuzz.log"
      for f in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
        [ -e "$f" ] && { echo "input $f:"; od -c "$f" | head -n 20; }
      done
      failed=$((failed + 1)); continue
    fi
    echo "ok   $name: fuzzed ${seconds}s, $(grep -Eo 'Done [0-9]+ runs' "$work/$name.fuzz.log" | tail -n 1)"
  fi
  passed=$((passed + 1))
done
echo "fuzz_smoke: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
