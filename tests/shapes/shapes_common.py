"""What gen_shapes.py and test_shapes.py share: the models, the image sizes
each is checked at, the batch, and the inputs."""
import numpy as np

BATCH = 2
# model -> (height, width) sizes: the position table's own, two larger (resampled up), one smaller (down)
MODELS = {
    "hf_dinov2_dyn": ((224, 224), (336, 336), (448, 224), (160, 160)),
    "hf_vit_dyn": ((224, 224), (336, 336), (448, 224), (160, 160)),
    "timm_vit_dyn": ((224, 224), (336, 336), (448, 224), (160, 160)),
}


def input_array(shape):
    """A deterministic input of that shape: values in [-1, 1] from a formula."""
    n = int(np.prod(shape))
    i = np.arange(n, dtype=np.float64)
    return np.sin(i * 0.6180339887 + np.floor(i / 97.0) * 1.3).astype(np.float32).reshape(shape)
