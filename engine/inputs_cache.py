"""Input sets and their reference outputs, kept on disk between workers and between runs.

Every evaluation worker draws its input sets from the run's seed (several per verification size)
and asks the numpy reference for their outputs: seconds of host work on large problems, on the
critical path of a run's start, and the same work again in every round of the agent loop and in
every run with the same seed. Both are stored, by default under the compile cache's root
(`$KERNTUNE_CACHE_DIR/inputs`, ~/.cache/kerntune/inputs):

- an input set under a key made of the arguments it is drawn for (dtype, role, shape, init,
  range), the problem's sizes, the seed and the code that draws it (`cached_inputs`);
- a reference's outputs under a key made of the reference's own file and every Python file
  beside it, numpy's version, the problem's sizes and the bytes of every input
  (`cached_reference`), so a cached output is only ever used for the very inputs it was computed
  from, by the same reference.

What the cache holds is at most LIMIT_BYTES; past that the files used longest ago make room. A
file that cannot be read is drawn or computed again. `KERNTUNE_INPUTS_CACHE=DIR` keeps the cache
in DIR; `KERNTUNE_INPUTS_CACHE=off` keeps nothing between runs (the agent loop then keeps a folder
for its own run, removed when it ends: `inputs_cache()`). The folder's name is handed to the
workers (separate processes) through the environment.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from .dtypes import np_dtype

ENV = "KERNTUNE_INPUTS_CACHE"
OFF = ("off", "0", "no", "false", "none")
# The most the cache holds: input sets drawn once for a check on new inputs (the gate's, a winner's
# re-check) are stored too, and the ones used longest ago make room for new ones.
LIMIT_BYTES = 4 << 30


def cache_folder() -> Path | None:
    """Where input sets and outputs are kept now; None when the cache is off (or cannot be made)."""
    value = os.environ.get(ENV, "").strip()
    if value.lower() in OFF:
        return None
    if value:
        folder = Path(value)
    else:
        root = os.environ.get("KERNTUNE_CACHE_DIR") or os.path.join(Path.home(), ".cache", "kerntune")
        folder = Path(root) / "inputs"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:  # a read-only home: nothing is cached, nothing fails
        return None
    return folder


@contextlib.contextmanager
def inputs_cache() -> Iterator[Path]:
    """The cache folder for every worker started inside the block: the lasting one, or with the
    cache off, a folder for this block only, removed at its end."""
    folder = cache_folder()
    if folder is not None:
        yield folder
        return
    outer = os.environ.get(ENV)
    folder = Path(tempfile.mkdtemp(prefix="kerntune-inputs-"))
    os.environ[ENV] = str(folder)
    try:
        yield folder
    finally:
        if outer is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = outer
        shutil.rmtree(folder, ignore_errors=True)


_folder = cache_folder


@functools.lru_cache(maxsize=None)
def _code_digest(path: str) -> bytes:
    """The bytes of one source file, hashed (the code that draws or computes what is cached)."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).digest()
    except OSError:
        return b""


def _reference_digest(path: Path, name: str) -> bytes:
    """The reference's own file, every Python file beside it (helpers it may import), its
    function's name and numpy's version: any change to them is another key."""
    h = hashlib.sha256(Path(path).read_bytes() + b"\0" + name.encode() + b"\0" + np.__version__.encode())
    for f in sorted(Path(path).parent.glob("*.py")):
        if f.name != Path(path).name:
            h.update(f.name.encode() + b"\0" + _code_digest(str(f)))
    return h.digest()


def cached_reference(fn: Callable[..., Mapping[str, Any]], path: Path, name: str) -> Callable[..., Mapping[str, Any]]:
    """`fn` itself with the cache off; otherwise a function that computes each input set's outputs
    once and reads them back after."""
    folder = _folder()
    if folder is None:
        return fn
    digest = _reference_digest(path, name)

    def reference(inputs: Mapping[str, Any], sizes: Mapping[str, int]) -> Mapping[str, Any]:
        file = folder / f"ref-{_content_key(digest, inputs, sizes)}{SUFFIX}"
        found = _read(file)
        if found is not None:
            return found
        outputs = fn(inputs, sizes)
        _write(file, outputs)
        return outputs

    # An input set drawn through `cached_inputs` is named by its key, which fixes its every byte
    # (the same arguments, sizes, seed, drawing code and numpy): its outputs are found by that key,
    # without reading (hashing) the inputs, the larger part of a cached set's time on large problems.
    def stored(drawn_as: str, sizes: Mapping[str, int]) -> Mapping[str, Any] | None:
        return _read(folder / f"ref-{_drawn_key(digest, drawn_as, sizes)}{SUFFIX}")

    def store(drawn_as: str, sizes: Mapping[str, int], outputs: Mapping[str, Any]) -> None:
        _write(folder / f"ref-{_drawn_key(digest, drawn_as, sizes)}{SUFFIX}", outputs)

    reference.raw, reference.stored, reference.store = fn, stored, store  # type: ignore[attr-defined]
    return reference


def _drawn_key(digest: bytes, drawn_as: str, sizes: Mapping[str, int]) -> str:
    return hashlib.sha256(digest + b"|drawn|" + drawn_as.encode() + repr(sorted(sizes.items())).encode()).hexdigest()[:40]


def cached_inputs(make: Callable[[Any, Any, int], Any], template: Any, problem: Any, seed: int,
                  restore: Callable[[int, dict, dict], Any]) -> Any:
    """`make(template, problem, seed)` (inputs.make_inputs), drawn once: a later call for the same
    arguments, sizes and seed, with the same drawing code, reads the arrays back and makes the set
    with `restore(seed, host arrays, scalars)` (inputs.Inputs). With the cache off, `make`."""
    folder = _folder()
    if folder is None:
        return make(template, problem, seed)
    module = sys.modules.get(getattr(make, "__module__", ""), None)
    h = hashlib.sha256(repr(sorted(problem.values.items())).encode() + f"|{seed}|{np.__version__}|".encode()
                       + _code_digest(str(getattr(module, "__file__", "") or "")))
    for a in template.arguments:
        if a.role in ("input", "inout", "scalar"):
            h.update(repr((a.name, a.dtype, a.role, [e.source for e in a.shape], a.value and a.value.source,
                           a.init, a.low, a.high, a.range_exprs and [e.source for e in a.range_exprs],
                           a.inf_fraction)).encode())
    key = h.hexdigest()[:40]
    file = folder / f"inputs-{key}{SUFFIX}"
    found = _read(file)
    made = make(template, problem, seed) if found is None else None
    if made is not None:
        _write(file, {**{f"host.{k}": v for k, v in made.host.items()},
                      **{f"scalar.{k}": v for k, v in made.scalars.items()}})
    else:
        made = restore(seed, {k[5:]: v for k, v in found.items() if k.startswith("host.")},
                        {k[7:]: v[()] for k, v in found.items() if k.startswith("scalar.")})
    made.key = key
    return made


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


# A cache file: MAGIC, the header's length (8 bytes, little-endian), the header (JSON: each array's
# name, dtype, shape, offset and length), then the arrays' bytes, each at a multiple of ALIGN. Read
# back memory-mapped: nothing is copied until used, and a large set costs what its uploads read.
MAGIC = b"kerntune arrays 1\n"
ALIGN = 64
SUFFIX = ".arrays"


def _write(file: Path, arrays_by_name: Mapping[str, Any]) -> None:
    """Each array's bytes, dtype and shape (numpy's own format cannot name bfloat16)."""
    entries, blobs, offset = [], [], 0
    try:
        for name, value in arrays_by_name.items():
            a = np.asarray(value)
            raw = np.ascontiguousarray(a).view(np.uint8).reshape(-1)  # 0-d arrays too
            entries.append([name, str(a.dtype), list(a.shape), offset, int(raw.nbytes)])
            blobs.append((offset, raw))
            offset += -(-raw.nbytes // ALIGN) * ALIGN
    except (TypeError, ValueError):  # something numpy cannot lay out as bytes: not cached
        return
    header = json.dumps({"arrays": entries}).encode()
    start = -(-(len(MAGIC) + 8 + len(header)) // ALIGN) * ALIGN
    size = start + offset
    if size > LIMIT_BYTES or not _make_room(file.parent, size):
        return
    tmp = file.with_name(f"{file.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(MAGIC + len(header).to_bytes(8, "little") + header)
            for at, raw in blobs:
                f.seek(start + at)
                f.write(memoryview(raw))
            f.truncate(size)
        os.replace(tmp, file)  # a worker reading at the same time sees the whole file or none
    except OSError:  # a full disk costs the cache, never the run
        tmp.unlink(missing_ok=True)
        return
    # workers that made room at once may each have counted on the same free bytes: once written,
    # the oldest files go until the cache is within its cap again
    _make_room(file.parent, 0, keep=file)


# What the cache's files take on disk is counted in whole blocks of this size at least (a file of
# a few bytes still takes a block): the cap holds for what `du` reports, not only for the bytes.
BLOCK = 4096


def _on_disk(st: os.stat_result) -> int:
    return max(-(-st.st_size // BLOCK) * BLOCK, getattr(st, "st_blocks", 0) * 512)


def _make_room(folder: Path, size: int, keep: Path | None = None) -> bool:
    """Room for `size` more bytes: the files used longest ago removed until it fits (another
    worker may be doing the same; a file gone meanwhile is simply gone). Files other workers are
    writing now count against the cap too, and are left alone; `keep` is never removed."""
    held = []
    writing = 0
    now = time.time()
    found = []
    try:
        with os.scandir(folder) as entries:  # (the folder's listing: no Path and glob per file)
            for e in entries:
                if SUFFIX in e.name:
                    try:
                        found.append((Path(e.path), e.stat()))
                    except OSError:  # gone meanwhile
                        continue
    except OSError:
        pass
    for f, st in found:
        if f.name.endswith(".tmp") and now - st.st_mtime < 600:
            writing += _on_disk(st)  # being written now (one a crashed worker left behind goes in time)
            continue
        held.append((st.st_mtime, _on_disk(st), f))
    total = writing + sum(n for _, n, _ in held)
    need = -(-size // BLOCK) * BLOCK
    for _, n, f in sorted(held, key=lambda x: x[0]):
        if total + need <= LIMIT_BYTES:
            break
        if f == keep:
            continue
        f.unlink(missing_ok=True)
        total -= n
    return total + need <= LIMIT_BYTES


def _read(file: Path) -> dict[str, np.ndarray] | None:
    """The arrays of a cache file, memory-mapped read-only; None when it is missing or damaged."""
    try:
        data = np.memmap(file, dtype=np.uint8, mode="r")
        head = len(MAGIC) + 8
        if bytes(data[:len(MAGIC)]) != MAGIC:
            return None
        length = int.from_bytes(bytes(data[len(MAGIC):head]), "little")
        entries = json.loads(bytes(data[head:head + length]))["arrays"]
        start = -(-(head + length) // ALIGN) * ALIGN
        out = {}
        for name, dtype, shape, offset, nbytes in entries:
            if start + offset + nbytes > data.size:
                return None
            out[name] = data[start + offset:start + offset + nbytes].view(np_dtype(dtype)).reshape(tuple(shape))
        os.utime(file)  # used now: the last to make room
        return out
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None
