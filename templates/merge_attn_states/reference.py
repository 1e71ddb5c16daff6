"""numpy reference for merge_attn_states (float32 math, as the kernels do it)."""

import numpy as np


def reference(inputs, sizes):
    sa = inputs["s_a"].astype(np.float32)
    sb = inputs["s_b"].astype(np.float32)
    sa = np.where(np.isinf(sa), -np.inf, sa)  # an infinite lse is an empty partial
    sb = np.where(np.isinf(sb), -np.inf, sb)
    m = np.maximum(sa, sb)
    empty = np.isneginf(m)
    safe_m = np.where(empty, np.float32(0), m)
    wa, wb = np.exp(sa - safe_m), np.exp(sb - safe_m)
    total = wa + wb
    with np.errstate(invalid="ignore", divide="ignore"):
        fa = np.where(empty, np.float32(1), wa / total)[..., None]
        fb = np.where(empty, np.float32(0), wb / total)[..., None]
        s_out = np.where(empty, -np.inf, np.log(total) + safe_m)
    va = inputs["v_a"].astype(np.float32)
    vb = inputs["v_b"].astype(np.float32)
    out = va * fa + vb * fb
    return {"out": out.astype(np.float16), "s_out": s_out.astype(np.float32)}
