import numpy as np


def _partials(x, segment):
    x = x.astype(np.float64)
    return np.concatenate([x, np.zeros(-len(x) % segment)]).reshape(-1, segment).sum(axis=1)


def reference(inputs, sizes):
    """One sum per block of 256 elements (reduce0, reduce1, reduce2)."""
    return {"g_odata": _partials(inputs["g_idata"], 256)}


def first_add(inputs, sizes):
    """One sum per block of 256 threads adding two elements each (reduce3)."""
    return {"g_odata": _partials(inputs["g_idata"], 512)}
