import numpy as np


def reference(inputs, sizes):
    x = inputs["inp"].astype(np.float64)
    m = x.mean(axis=1, keepdims=True)
    v = ((x - m) ** 2).mean(axis=1, keepdims=True)
    s = 1.0 / np.sqrt(v + 1e-5)
    out = s * (x - m) * inputs["weight"] + inputs["bias"]
    return {"out": out, "mean": m[:, 0], "rstd": s[:, 0]}
