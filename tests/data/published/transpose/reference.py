import numpy as np


def transpose(inputs, sizes):
    """odata = idata transposed (idata: height rows of width; square where the kernel reads no sizes)."""
    return {"odata": np.ascontiguousarray(inputs["idata"].T)}


def copy(inputs, sizes):
    return {"odata": inputs["idata"].copy()}
