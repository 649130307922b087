#!/usr/bin/env bash
# Peak memory of training, three configurations side by side in one run:
#   plain    JIT off, no in-place pass, no buffer reuse, no early release
#            (--use_inplace=false --cache_allocations=false --release_shape_only=false)
#   reuse    JIT off, in-place pass, caching allocator and early release of
#            buffers only shape readers need (the defaults)
#   jit      JIT on, with all of them
# For each model: the process's peak resident set size as /usr/bin/time -v
# reports it (Debian package `time`), and kiln's own figures from
# --metrics_out: peak bytes of tensors live at once during the training steps
# (the loaded dataset excluded) and bytes allocated from the system.
# Prints a markdown table (docs/benchmarks.md holds one).
#
#   bash tools/bench/memory.sh                       # all five models, 30 steps each
#   KILN=build/tools/kiln STEPS=5 MODELS="mlp" bash tools/bench/memory.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

kiln="${KILN:-build/tools/kiln}"
steps="${STEPS:-30}"
models="${MODELS:-mlp cnn transformer resnet gpt}"
time_bin="${TIME_BIN:-/usr/bin/time}"

if [ ! -x "$time_bin" ]; then
  echo "memory.sh: $time_bin is missing (Debian package 'time': apt-get install time)" >&2
  exit 1
fi
if [ ! -x "$kiln" ]; then
  echo "memory.sh: no kiln binary at $kiln (build first, or set KILN=...)" >&2
  exit 1
fi

model_args() {
  case "$1" in
    mlp) echo "--model mlp --dataset digits --batch_size 256" ;;
    cnn) echo "--model cnn --dataset fashion-mnist --batch_size 64" ;;
    transformer) echo "--model transformer --dataset synthetic --batch_size 64" ;;
    # The bench's resnet b32 and gpt b16 (tools/bench/bench_configs.py).
    resnet) echo "--model resnet --dataset synthetic --resnet_widths 32,64,128,256 --resnet_blocks 2 --batch_size 32 --optimizer momentum --lr 0.05" ;;
    gpt) echo "--model gpt --dataset synthetic --gpt_layers 4 --seq_len 128 --d_model 256 --num_heads 4 --ffn_dim 1024 --vocab 256 --batch_size 16 --optimizer adam --lr 0.001" ;;
    *) echo "memory.sh: unknown model '$1' (mlp, cnn, transformer, resnet, gpt)" >&2; return 1 ;;
  esac
}

configs=(plain reuse jit)
config_args() {
  case "$1" in
    plain) echo "--use_jit=false --use_inplace=false --cache_allocations=false --release_shape_only=false --recompute=false" ;;
    reuse) echo "--use_jit=false --use_inplace=true --cache_allocations=true" ;;
    jit) echo "--use_jit=true --use_inplace=true --cache_allocations=true" ;;
  esac
}

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# JSON number of "key" in a metrics file.
json_num() { sed -n "s/.*\"$2\": \([0-9.]*\).*/\1/p" "$1"; }
mib() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 1048576 }'; }

echo "| model | configuration | peak RSS (MiB) | peak tensor bytes (MiB) | vs plain | allocated from the system (MiB) |"
echo "|---|---|---:|---:|---:|---:|"
for m in $models; do
  margs="$(model_args "$m")"
  base=""
  for c in "${configs[@]}"; do
    out="$tmp/$m.$c"
    # shellcheck disable=SC2086
    if ! "$time_bin" -v -o "$out.time" "$kiln" train $margs $(config_args "$c") --epochs 1000 \
        --max_steps "$steps" --progress=false --metrics_out "$out.json" >"$out.log" 2>&1; then
      echo "memory.sh: kiln train failed for $m ($c):" >&2
      cat "$out.log" >&2
      exit 1
    fi
    rss_kb="$(sed -n 's/.*Maximum resident set size (kbytes): \([0-9]*\).*/\1/p' "$out.time")"
    peak="$(json_num "$out.json" peak_tensor_bytes)"
    alloc="$(json_num "$out.json" allocated_bytes)"
    [ -z "$base" ] && base="$peak"
    ratio="$(awk -v p="$peak" -v b="$base" 'BEGIN { printf "%.2fx", (b > 0) ? p / b : 0 }')"
    echo "| $m | $c | $(awk -v k="$rss_kb" 'BEGIN { printf "%.1f", k / 1024 }') | $(mib "$peak") | $ratio | $(mib "$alloc") |"
  done
done
