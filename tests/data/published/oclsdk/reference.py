import numpy as np


def vector_add(inputs, sizes):
    return {"c": inputs["a"].astype(np.float64) + inputs["b"].astype(np.float64)}


def dot4(inputs, sizes):
    a = inputs["a"].astype(np.float64).reshape(-1, 4)
    b = inputs["b"].astype(np.float64).reshape(-1, 4)
    return {"c": (a * b).sum(axis=1)}


def partial_sums(inputs, sizes):
    """Each group's sum of 256 float4s (1024 floats), zeros past the end."""
    x = inputs["input"].astype(np.float64).ravel()
    groups = -(-sizes["n4"] // 256)
    padded = np.zeros(groups * 1024)
    padded[:x.size] = x
    return {"output": padded.reshape(groups, 1024).sum(axis=1)}


def matmul(inputs, sizes):
    """C = A B: A hA x wA, B wA x wB."""
    return {"C": inputs["A"].astype(np.float64) @ inputs["B"].astype(np.float64)}
