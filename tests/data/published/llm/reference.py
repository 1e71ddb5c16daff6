import numpy as np


def encoder(inputs, sizes):
    b, t, c = sizes["B"], sizes["T"], sizes["C"]
    ids = inputs["inp"].reshape(b, t)
    wte, wpe = inputs["wte"].astype(np.float64), inputs["wpe"].astype(np.float64)
    return {"out": (wte[ids] + wpe[:t][None, :, :]).reshape(b, t, c)}


def layernorm(inputs, sizes):
    x = inputs["inp"].astype(np.float64)
    m = x.mean(axis=-1)
    s = 1.0 / np.sqrt(((x - m[:, None]) ** 2).mean(axis=-1) + 1e-5)
    out = (x - m[:, None]) * s[:, None] * inputs["weight"].astype(np.float64) + inputs["bias"].astype(np.float64)
    return {"out": out, "mean": m, "rstd": s}


def softmax(inputs, sizes):
    x = inputs["inp"].astype(np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return {"out": e / e.sum(axis=-1, keepdims=True)}


def matmul(inputs, sizes):
    """out = inp @ weight.T + bias: inp BT x C, weight OC x C."""
    x, w = inputs["inp"].astype(np.float64), inputs["weight"].astype(np.float64)
    return {"out": x @ w.T + inputs["bias"].astype(np.float64)}


def gelu(inputs, sizes):
    x = inputs["inp"].astype(np.float64)
    return {"out": 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))}


def residual(inputs, sizes):
    return {"out": inputs["inp1"].astype(np.float64) + inputs["inp2"].astype(np.float64)}


def crossentropy(inputs, sizes):
    b, t, v = sizes["B"], sizes["T"], sizes["V"]
    probs = inputs["probs"].astype(np.float64).reshape(b * t, v)
    ids = inputs["targets"].reshape(b * t)
    return {"losses": -np.log(probs[np.arange(b * t), ids]).reshape(b, t)}
