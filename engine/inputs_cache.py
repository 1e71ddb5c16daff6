"""Input sets and their reference outputs, kept for the length of a run that starts many workers.

Every round of the agent loop starts new evaluation workers (each round's template is another
kernel), and each worker draws its input sets from the run's seed and asks the numpy reference
for their outputs: the same inputs every round, and so the same outputs. Within `inputs_cache()`
(the loop holds it for its whole run) both are stored on disk:

- an input set under a key made of the arguments it is drawn for (dtype, role, shape, init,
  range), the problem's sizes and the seed (`cached_inputs`);
- a reference's outputs under a key made of the reference's own file, the problem's sizes and the
  bytes of every input (`cached_reference`), so a cached output is only ever used for the very
  inputs it was computed from.

The folder is handed to the workers (separate processes) through the environment, and removed
when the run ends. Outside such a run nothing is cached.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from .inputs import Inputs

ENV = "KERNTUNE_INPUTS_CACHE"
# The most a run's cache holds: input sets drawn once for a check on new inputs (the gate's, a
# winner's re-check) are stored too, and never read again.
LIMIT_BYTES = 4 << 30


@contextlib.contextmanager
def inputs_cache() -> Iterator[Path]:
    """A cache folder for every worker started inside the block (an enclosing block's folder when
    there is one); removed at the end."""
    outer = os.environ.get(ENV)
    if outer:
        yield Path(outer)
        return
    folder = Path(tempfile.mkdtemp(prefix="kerntune-inputs-"))
    os.environ[ENV] = str(folder)
    try:
        yield folder
    finally:
        os.environ.pop(ENV, None)
        shutil.rmtree(folder, ignore_errors=True)


def _folder() -> Path | None:
    folder = os.environ.get(ENV)
    return Path(folder) if folder and Path(folder).is_dir() else None


def cached_reference(fn: Callable[..., Mapping[str, Any]], path: Path, name: str) -> Callable[..., Mapping[str, Any]]:
    """`fn` itself outside `inputs_cache()`; inside, a function that computes each input set's
    outputs once for the whole run."""
    folder = _folder()
    if folder is None:
        return fn
    digest = hashlib.sha256(Path(path).read_bytes() + b"\0" + name.encode()).digest()

    def reference(inputs: Mapping[str, Any], sizes: Mapping[str, int]) -> Mapping[str, Any]:
        file = folder / f"ref-{_content_key(digest, inputs, sizes)}.npz"
        found = _read(file)
        if found is not None:
            return found
        outputs = fn(inputs, sizes)
        _write(file, outputs)
        return outputs

    return reference


def cached_inputs(make: Callable[[Any, Any, int], Any], template: Any, problem: Any, seed: int) -> Any:
    """`make(template, problem, seed)` (inputs.make_inputs), drawn once per run: a later call for
    the same arguments, sizes and seed reads the arrays back. Outside `inputs_cache()`, `make`."""
    folder = _folder()
    if folder is None:
        return make(template, problem, seed)
    h = hashlib.sha256(repr(sorted(problem.values.items())).encode() + f"|{seed}|".encode())
    for a in template.arguments:
        if a.role in ("input", "inout", "scalar"):
            h.update(repr((a.name, a.dtype, a.role, [e.source for e in a.shape], a.value and a.value.source,
                           a.init, a.low, a.high, a.range_exprs and [e.source for e in a.range_exprs],
                           a.inf_fraction)).encode())
    file = folder / f"inputs-{h.hexdigest()[:40]}.npz"
    found = _read(file)
    made = make(template, problem, seed) if found is None else None
    if made is not None:
        _write(file, {**{f"host.{k}": v for k, v in made.host.items()},
                      **{f"scalar.{k}": v for k, v in made.scalars.items()}})
        return made
    return Inputs(seed, {k[5:]: v for k, v in found.items() if k.startswith("host.")},
                  {k[7:]: v[()] for k, v in found.items() if k.startswith("scalar.")})


def _content_key(digest: bytes, inputs: Mapping[str, Any], sizes: Mapping[str, int]) -> str:
    h = hashlib.sha256(digest)
    h.update(repr(sorted(sizes.items())).encode())
    for name in sorted(inputs):
        v = inputs[name]
        h.update(name.encode() + b"\0")
        if isinstance(v, np.ndarray):
            h.update(f"{v.dtype}{v.shape}".encode())
            h.update(np.ascontiguousarray(v).view(np.uint8).data)
        else:
            h.update(repr(v).encode())
    return h.hexdigest()[:40]


def _write(file: Path, arrays_by_name: Mapping[str, Any]) -> None:
    """Each array's bytes, dtype and shape (numpy's own format cannot name bfloat16)."""
    arrays: dict[str, np.ndarray] = {}
    try:
        for name, value in arrays_by_name.items():
            a = np.asarray(value)
            arrays[f"bytes__{name}"] = np.ascontiguousarray(a).view(np.uint8).reshape(-1)  # 0-d arrays too
            arrays[f"dtype__{name}"] = np.array(str(a.dtype))
            arrays[f"shape__{name}"] = np.array(a.shape, dtype=np.int64)
    except (TypeError, ValueError):  # something numpy cannot lay out as bytes__ not cached
        return
    size = sum(a.nbytes for a in arrays.values())
    if _held(file.parent) + size > LIMIT_BYTES:  # a full cache stores nothing more; what it holds still serves
        return
    tmp = file.with_name(f"{file.stem}.{os.getpid()}.tmp.npz")
    try:
        np.savez(tmp, **arrays)
        os.replace(tmp, file)  # a worker reading at the same time sees the whole file or none
    except OSError:  # a full disk costs the cache, never the run
        tmp.unlink(missing_ok=True)


def _held(folder: Path) -> int:
    total = 0
    for f in folder.glob("*.npz"):
        try:
            total += f.stat().st_size
        except OSError:  # another worker's file, renamed or removed meanwhile
            pass
    return total


def _read(file: Path) -> dict[str, np.ndarray] | None:
    from .template import np_dtype

    try:
        with np.load(file, allow_pickle=False) as data:
            names = [k[len("bytes__"):] for k in data.files if k.startswith("bytes__")]
            return {n: data[f"bytes__{n}"].view(np_dtype(str(data[f"dtype__{n}"]))).reshape(tuple(data[f"shape__{n}"]))
                    for n in names}
    except (OSError, ValueError, KeyError, TypeError):
        return None
