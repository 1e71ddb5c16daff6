import numpy as np


def reference(inputs, sizes):
    x = inputs["g_idata"].astype(np.float64)
    pad = -len(x) % 512
    return {"g_odata": np.concatenate([x, np.zeros(pad)]).reshape(-1, 512).sum(axis=1)}
