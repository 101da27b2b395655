#!/usr/bin/env bash
# Step-0 gradients of quill (bf16) and of transformers (bf16 autocast) each against transformers in
# fp32, the closest thing to the true gradient: in bf16 the q/k gradients of a freshly initialised
# model come from small differences (near-uniform attention) and carry large relative rounding
# error in any bf16 implementation, so the question is whether quill's error is of the reference's
# own size. Usage: QUILL=... grad_truth.sh CONFIG ROW_TOKENS GLOBAL_BATCH (writes $OUT/NAME-truth.txt)
set -uo pipefail
CONFIG=$1 T=$2 GB=$3
here=$(cd "$(dirname "$0")" && pwd)
name=$(basename "$CONFIG" .json)
W=${WORK:-/tmp/grad-truth/$name}
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/out}
rm -rf "$W"; mkdir -p "$W" "$OUT"
"$QUILL" data synth --row-tokens "$T" --out "$W/rows" > /dev/null
"$PY" "$here/make_init.py" --config "$CONFIG" --seed 1234 --out "$W/init" > "$W/init.log" 2>&1 || { cat "$W/init.log"; exit 2; }
common=(--rows "$W/rows" --global-batch "$GB" --lr 3e-4 --min-lr 3e-5 --warmup-fraction 0.1 --weight-decay 0.1
        --beta1 0.9 --beta2 0.95 --adam-eps 1e-8 --clip-grad 1.0 --dump-grads-step 0)
"$QUILL" train --init "$W/init" --device cuda "${common[@]}" --steps 20 --stop-after 1 --overwrite \
  --freeze-preset miles --loss-vocab unpadded --quiet --out "$W/quill" > "$W/quill.log" 2>&1 || { tail "$W/quill.log"; exit 3; }
"$PY" "$here/train_reference.py" --init "$W/init" "${common[@]}" --steps 20 --precision fp32 \
  --compare-grads "$W/quill/grads_step0.safetensors" --out "$W/f32" > "$W/f32.log" 2>&1 || { tail -30 "$W/f32.log"; exit 4; }
rm -f "$W/quill/grads_step0.safetensors"
"$PY" "$here/train_reference.py" --init "$W/init" "${common[@]}" --steps 20 --precision bf16 --no-grads-file \
  --compare-grads "$W/f32/grads_step0.safetensors" --out "$W/b16" > "$W/b16.log" 2>&1 || { tail -30 "$W/b16.log"; exit 5; }
rm -f "$W/f32/grads_step0.safetensors"
"$PY" - "$W" <<'PY' | tee "$OUT/$name-truth.txt"
import json, sys
w = sys.argv[1]
q = json.load(open(f"{w}/f32/grad_errors_step0.json"))["per_tensor"]   # ||quill - f32|| / ||f32||
r = json.load(open(f"{w}/b16/grad_errors_step0.json"))["per_tensor"]   # ||f32 - ref_bf16|| / ||ref_bf16||
print(f"{'tensor':58s} {'quill bf16':>11s} {'ref bf16':>11s} {'ratio':>7s}   (relative L2 error against transformers fp32)")
ratios = []
for k in sorted(q):
    a, b = q[k], r.get(k)
    ratio = a / b if b else float("inf")
    ratios.append((ratio, k))
    print(f"{k:58s} {a:11.3e} {b:11.3e} {ratio:7.2f}")
ratios.sort()
print(f"tensors {len(ratios)}; quill/reference error ratio: median {ratios[len(ratios)//2][0]:.2f}, max {ratios[-1][0]:.2f} ({ratios[-1][1]})")
print(f"max quill error {max(q.values()):.3e}; max reference bf16 error {max(v for v in r.values() if v is not None):.3e}")
PY
