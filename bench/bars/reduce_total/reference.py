import numpy as np


def reference(inputs, sizes):
    return {"out": inputs["out"].astype(np.float64) + inputs["x"].astype(np.float64).sum()}
