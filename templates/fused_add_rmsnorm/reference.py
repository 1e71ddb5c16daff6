"""numpy reference for fused_add_rmsnorm: the residual is rounded to the element type
(float16 or bfloat16) before the norm, as the kernels store it and read it back."""

import numpy as np


def reference(inputs, sizes):
    elem = inputs["input"].dtype
    summed = (inputs["input"].astype(np.float32) + inputs["residual"].astype(np.float32)).astype(elem)
    r = summed.astype(np.float32)
    mean_sq = np.mean(np.square(r, dtype=np.float64), axis=1, keepdims=True)
    scale = (1.0 / np.sqrt(mean_sq + float(inputs["eps"]))).astype(np.float32)
    normed = (r * scale * inputs["weight"].astype(np.float32)).astype(elem)
    return {"residual": summed, "input": normed}
