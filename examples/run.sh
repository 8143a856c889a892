#!/usr/bin/env bash
# examples/run.sh: the main job on the bundled example model (a tiny timm-style
# ViT exported by torch.onnx at opset 17): IR statistics, a run of the reference
# interpreter on a seeded input, and the check against PyTorch's output.
set -euo pipefail
cd "$(dirname "$0")/.."
VITC=${VITC:-build/vitc}
MODEL=examples/vit-tiny.onnx
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

echo "== $VITC dump $MODEL --stage optimized --stats"
"$VITC" dump "$MODEL" --stage optimized --stats
echo "== $VITC run $MODEL --input examples/vit-tiny.input.npy"
"$VITC" run "$MODEL" --input examples/vit-tiny.input.npy --output-dir "$OUT" --repeat 3
.venv/bin/python - "$OUT/output.npy" examples/vit-tiny.output.npy <<'PY'
import sys, numpy as np
out, ref = np.load(sys.argv[1]), np.load(sys.argv[2])
err = np.max(np.abs(out - ref)) / np.max(np.abs(ref))
print(f"classes (top-3 per image): {np.argsort(-out, axis=1)[:, :3].tolist()}")
print(f"max |vitc - PyTorch| / max |PyTorch| = {err:.3g}")
sys.exit(0 if err <= 1e-4 else 1)
PY
