import numpy as np


def heat(inputs, sizes):
    u = inputs["u"].astype(np.float64)
    out = u.copy()
    out[1:-1, 1:-1] = u[1:-1, 1:-1] + 0.1 * (u[1:-1, 2:] + u[1:-1, :-2] + u[2:, 1:-1] + u[:-2, 1:-1]
                                             - 4.0 * u[1:-1, 1:-1])
    return {"un": out}


def jacobi(inputs, sizes):
    u = inputs["u"].astype(np.float64)
    out = inputs["unew"].astype(np.float64).copy()
    out[1:-1, 1:-1] = 0.25 * (u[1:-1, :-2] + u[1:-1, 2:] + u[:-2, 1:-1] + u[2:, 1:-1])
    return {"unew": out}


def stencil7(inputs, sizes):
    x = inputs["in"].astype(np.float64)
    out = inputs["out"].astype(np.float64).copy()
    c = x[1:-1, 1:-1, 1:-1]
    out[1:-1, 1:-1, 1:-1] = 0.4 * c + 0.1 * (x[1:-1, 1:-1, :-2] + x[1:-1, 1:-1, 2:] + x[1:-1, :-2, 1:-1]
                                             + x[1:-1, 2:, 1:-1] + x[:-2, 1:-1, 1:-1] + x[2:, 1:-1, 1:-1])
    return {"out": out}
