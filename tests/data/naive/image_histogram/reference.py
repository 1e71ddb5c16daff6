import numpy as np


def reference(inputs, sizes):
    """What the bins held plus the count of each grey level."""
    counts = np.bincount(inputs["img"].astype(np.int64).ravel(), minlength=256)
    return {"hist": inputs["hist"].astype(np.int64) + counts}
