"""numpy reference for the AdamW update (the scalars as kernel.toml gives them)."""

import numpy as np

LR, BETA1, BETA2, C1, C2, EPS, WD = 1e-3, 0.9, 0.999, 0.1, 0.001, 1e-8, 0.01


def reference(inputs, sizes):
    p, g = inputs["params"].astype(np.float64), inputs["grads"].astype(np.float64)
    m = BETA1 * inputs["m"].astype(np.float64) + (1 - BETA1) * g
    v = BETA2 * inputs["v"].astype(np.float64) + (1 - BETA2) * g * g
    p = p - LR * ((m / C1) / (np.sqrt(v / C2) + EPS) + WD * p)
    return {"params": p, "m": m, "v": v}
