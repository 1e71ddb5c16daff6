import numpy as np


def matmul(inputs, sizes):
    """P = M N, square Width x Width, row-major."""
    return {"P": inputs["M"].astype(np.float64) @ inputs["N"].astype(np.float64)}


def convolution(inputs, sizes):
    """A 5 x 5 mask over the image, zero outside it (a correlation: mask[i][j] at row - 2 + i, col - 2 + j)."""
    x = inputs["in"].astype(np.float64)
    m = inputs["mask"].astype(np.float64).reshape(5, 5)
    h, w = x.shape
    padded = np.zeros((h + 4, w + 4))
    padded[2:-2, 2:-2] = x
    out = np.zeros((h, w))
    for i in range(5):
        for j in range(5):
            out += m[i, j] * padded[i:i + h, j:j + w]
    return {"out": out}


def stencil_1d(inputs, sizes):
    """out[i] = in[i] + ... + in[i + 6]: the input padded by 3 on each side."""
    x = inputs["in"].astype(np.float64)
    n = sizes["n"]
    return {"out": sum(x[o:o + n] for o in range(7))}


def histogram(inputs, sizes):
    """Bin b counts the letters 'a' + 4b to 'a' + 4b + 3, added to the bins' counts."""
    pos = inputs["data"].astype(np.int64) - ord("a")
    pos = pos[(pos >= 0) & (pos < 26)]
    return {"histo": inputs["histo"].astype(np.int64) + np.bincount(pos // 4, minlength=7)}


def total(inputs, sizes):
    """The output's value plus the sum of the input."""
    return {"output": inputs["output"].astype(np.float64) + inputs["input"].astype(np.float64).sum()}


def section_scan(inputs, sizes):
    """The inclusive prefix sums of each section of 512 elements."""
    x = inputs["X"].astype(np.float64)
    out = np.empty_like(x)
    for s in range(0, x.size, 512):
        out[s:s + 512] = np.cumsum(x[s:s + 512])
    return {"Y": out}
