import numpy as np


def reference(inputs, sizes):
    x = inputs["in"].astype(np.float64)
    pad = -len(x) % 256
    return {"out": np.concatenate([x, np.zeros(pad)]).reshape(-1, 256).sum(axis=1)}
