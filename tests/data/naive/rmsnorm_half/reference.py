import numpy as np


def reference(inputs, sizes):
    x = inputs["inp"].astype(np.float64)
    w = inputs["weight"].astype(np.float64)
    scale = 1.0 / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-6)
    return {"out": x * scale * w}
