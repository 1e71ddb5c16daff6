import numpy as np


def reference(inputs, sizes):
    """What the bins held plus the count of each byte value."""
    counts = np.bincount(inputs["data"].astype(np.int64), minlength=256)
    return {"bins": inputs["bins"].astype(np.int64) + counts}
