import numpy as np


def reference(inputs, sizes):
    x = inputs["in"].astype(np.float64)
    taps = inputs["taps"].astype(np.float64)
    r = len(taps) // 2
    pad = [(0, 0), (0, 0)]
    pad[1] = (r, r)
    p = np.pad(x, pad)
    out = np.zeros_like(x)
    n = x.shape[1]
    for j in range(-r, r + 1):
        sl = [slice(None), slice(None)]
        sl[1] = slice(r + j, r + j + n)
        out += taps[r - j] * p[tuple(sl)]
    return {"out": out}
