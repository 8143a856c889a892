#!/usr/bin/env bash
# examples/run.sh: the main job on the bundled example model, a tiny timm-style
# ViT exported by torch.onnx at opset 17: compile it to a shared library, look
# inside it, run it on a seeded batch of 3 images and check the result against
# PyTorch's output and against the reference interpreter, then classify an
# image file with the C example that uses only the runtime API.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${VITC_BUILD_DIR:-build}
VITC=$BUILD/vitc
MODEL=examples/vit-tiny.onnx
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

echo "== $VITC $MODEL -o vit-tiny.so --verbose"
"$VITC" "$MODEL" -o "$OUT/vit-tiny.so" --batch 8 --verbose
echo "== $VITC inspect vit-tiny.so"
"$VITC" inspect "$OUT/vit-tiny.so"
echo "== $VITC run vit-tiny.so --input examples/vit-tiny.input.npy --repeat 20"
"$VITC" run "$OUT/vit-tiny.so" --input examples/vit-tiny.input.npy --output-dir "$OUT" --repeat 20
.venv/bin/python - "$OUT/output.npy" examples/vit-tiny.output.npy <<'PY'
import sys, numpy as np
out, ref = np.load(sys.argv[1]), np.load(sys.argv[2])
err = np.max(np.abs(out - ref)) / np.max(np.abs(ref))
print(f"classes (top-3 per image): {np.argsort(-out, axis=1)[:, :3].tolist()}")
print(f"max |vitc - PyTorch| / max |PyTorch| = {err:.3g}")
sys.exit(0 if err <= 1e-4 else 1)
PY
echo "== $VITC compare $MODEL vit-tiny.so"
"$VITC" compare "$MODEL" "$OUT/vit-tiny.so"
if [ -x "$BUILD/examples/classify" ]; then
  echo "== classify vit-tiny.so tests/data/runtime/pattern64.png"
  "$BUILD/examples/classify" "$OUT/vit-tiny.so" tests/data/runtime/pattern64.png --top 3
fi
