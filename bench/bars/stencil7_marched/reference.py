import numpy as np


def stencil7(inputs, sizes):
    """out = 0.4 * centre + 0.1 * the six face neighbours at interior points, the border kept."""
    x = inputs["in"].astype(np.float64)
    out = inputs["out"].astype(np.float64).copy()
    faces = x[1:-1, 1:-1, :-2] + x[1:-1, 1:-1, 2:] + x[1:-1, :-2, 1:-1] + x[1:-1, 2:, 1:-1] + x[:-2, 1:-1, 1:-1] \
        + x[2:, 1:-1, 1:-1]
    out[1:-1, 1:-1, 1:-1] = 0.4 * x[1:-1, 1:-1, 1:-1] + 0.1 * faces
    return {"out": out}
