import numpy as np


def reference(inputs, sizes):
    return {"s": inputs["x"].astype(np.float64).sum(axis=1).astype(np.float32)}
