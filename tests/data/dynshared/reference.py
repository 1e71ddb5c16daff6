import numpy as np


def reference(inputs, sizes):
    return {"out": inputs["inp"].astype(np.float64).sum(axis=1)}
