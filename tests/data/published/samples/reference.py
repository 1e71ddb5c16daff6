import numpy as np


def vector_add(inputs, sizes):
    return {"C": inputs["A"].astype(np.float64) + inputs["B"].astype(np.float64)}


def matmul(inputs, sizes):
    """C = A B: A hA x wA, B wA x wB."""
    return {"C": inputs["A"].astype(np.float64) @ inputs["B"].astype(np.float64)}
