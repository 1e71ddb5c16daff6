"""numpy reference for GELU, tanh approximation."""

import numpy as np


def reference(inputs, sizes):
    x = inputs["inp"].astype(np.float64)
    return {"out": 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))}
