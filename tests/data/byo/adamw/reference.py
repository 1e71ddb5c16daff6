import numpy as np


def reference(inputs, sizes):
    lr, b1, b2 = inputs["learning_rate"], inputs["beta1"], inputs["beta2"]
    c1, c2, eps, wd = inputs["beta1_correction"], inputs["beta2_correction"], inputs["eps"], inputs["weight_decay"]
    g = inputs["grads_memory"].astype(np.float64)
    p = inputs["params_memory"].astype(np.float64)
    m = b1 * inputs["m_memory"] + (1 - b1) * g
    v = b2 * inputs["v_memory"] + (1 - b2) * g * g
    p = p - lr * ((m / c1) / (np.sqrt(v / c2) + eps) + wd * p)
    return {"params_memory": p, "m_memory": m, "v_memory": v}
