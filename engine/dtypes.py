"""The element types a template's arguments may have: their sizes in bytes and numpy's dtype for each."""

from __future__ import annotations

from typing import Any

DTYPES = {
    "float16": 2,
    "bfloat16": 2,
    "float32": 4,
    "float64": 8,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "uint64": 8,
}
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")


def np_dtype(name: str) -> Any:
    """numpy's dtype for a kerntune dtype name; numpy has no bfloat16, ml_dtypes gives it one."""
    import numpy as np

    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)
