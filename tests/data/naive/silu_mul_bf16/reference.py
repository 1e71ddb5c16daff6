"""numpy reference for silu_and_mul (float32 math: float16 or bfloat16 outputs cannot tell it from float64)."""

import numpy as np


def reference(inputs, sizes):
    d = sizes["d"]
    x = inputs["x"].astype(np.float32)
    gate, up = x[:, :d], x[:, d:]
    return {"out": (gate / (1.0 + np.exp(-gate)) * up).astype(inputs["x"].dtype)}
