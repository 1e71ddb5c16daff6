"""The working buffers of one evaluation on the device, each between two guard regions.

Every verification size has its own buffers (engine/evaluate.py's Evaluator checks and times in
them). What this module does with them, and nothing else:

- a buffer is allocated with GUARD_BYTES before and after it; `arm` writes a random pattern there
  (NaN with random payloads for a float buffer, so that a kernel reading past an input computes
  NaN), drawn from the system's entropy, never from the run's seed;
- `restore` copies an input set's pristine inputs (uploaded once per set) into the buffers;
- `poison` overwrites every output before a launch with one of the poisons (all-ones bytes,
  random bits, or another set's correct output), and remembers which, so that elements a kernel
  never wrote can be named (`unwritten`);
- `outputs` reads a launch's outputs back the first time each is asked for, and refuses to read
  them after a later launch.
"""

from __future__ import annotations

from collections import abc
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from .backends import GUARD_BYTES, Backend, ConstantArg
from .compare import TOLERANCE
from .inputs import Inputs, arg_nbytes, arg_shape
from .template import Argument, Problem, Template, np_dtype

INT_POISON = -0x5A5A5A5A
# Elements still holding the poison are called unwritten only from this many on (and when they are
# most of the failing ones): a wrong value can equal a poison by chance.
UNWRITTEN_MIN = 8


@dataclass(frozen=True)
class Guarded:
    """A working buffer: `raw` holds GUARD_BYTES of guard, the data, and GUARD_BYTES of guard;
    `view` is what the kernel is given."""

    raw: Any
    view: Any
    nbytes: int


class GuardedBuffers:
    """The working buffers of every verification size, their guards and their outputs' poisons."""

    def __init__(self, backend: Backend, template: Template, problems: tuple[Problem, ...],
                 rng: np.random.Generator):
        self.backend = backend
        self.template = template
        self.problems = problems
        self.rng = rng  # the system's entropy (never the run's seed): patterns and poisons
        self.generation = 0  # launches so far: outputs read lazily must be read before the next
        # what the buffers at the tuning size hold for the timed launches (engine/timing.py): the
        # input set and its change made there; (None, {}) once anything else was copied in
        self.staged: tuple[Inputs | None, dict[str, tuple[int, int, int]]] = (None, {})
        self.poisoned: dict[tuple[int, str], np.ndarray] = {}  # each output's latest poison
        self._buffers: dict[int, dict[str, Guarded]] = {}
        self._host_out: dict[tuple[int, str], np.ndarray] = {}
        self._guards: dict[str, np.ndarray] = {}  # guard pattern by dtype (NaN for floats)
        self._bits: dict[tuple, np.ndarray] = {}
        self._resident: dict[int, tuple[np.ndarray, Any]] = {}
        self._items = {a.name: np_dtype(a.dtype).itemsize for a in template.arguments if a.is_buffer}
        self._timing_poison: dict[str, list[tuple[str, Any, np.ndarray]]] | None = None

    def nbytes(self, a: Argument, which: int) -> int:
        return arg_nbytes(a, self.problems[which])

    def of(self, which: int) -> dict[str, Guarded]:
        """The buffers of verification size `which`, allocated the first time."""
        if which not in self._buffers:
            bufs = {}
            for a in self.template.arguments:
                if a.is_buffer:
                    nbytes = self.nbytes(a, which)
                    raw = self.backend.alloc(nbytes + 2 * GUARD_BYTES)
                    bufs[a.name] = Guarded(raw, self.backend.view(raw, GUARD_BYTES, nbytes), nbytes)
            self._buffers[which] = bufs
        return self._buffers[which]

    def args(self, which: int, inputs: Inputs) -> list[Any]:
        """A launch's arguments: the buffers (constant ones named), the set's scalars."""
        bufs = self.of(which)
        return [(ConstantArg(a.name, bufs[a.name].view, bufs[a.name].nbytes) if a.constant else bufs[a.name].view)
                if a.is_buffer else inputs.scalars[a.name] for a in self.template.arguments]

    def guard(self, a: Argument) -> np.ndarray:
        """The guard pattern of a buffer (GUARD_BYTES): NaN with random payloads and signs for a
        float buffer, so that a kernel reading past an input computes NaN; random bytes
        otherwise. Drawn from the system's entropy: different every run."""
        if a.dtype not in self._guards:
            item = np_dtype(a.dtype).itemsize if a.dtype in TOLERANCE else 1
            words = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[item]
            raw = self.rng.integers(0, 256, GUARD_BYTES, dtype=np.uint8).view(words)
            if a.dtype in TOLERANCE:
                mantissa = {"float16": 10, "bfloat16": 7, "float32": 23, "float64": 52}[a.dtype]
                bits = 8 * item
                quiet = words(1 << (mantissa - 1))
                exponent = words(((1 << (bits - 1 - mantissa)) - 1) << mantissa)
                keep = words(((1 << (mantissa - 1)) - 1) | (1 << (bits - 1)))  # payload and sign
                raw = (raw & keep) | exponent | quiet
            self._guards[a.dtype] = np.ascontiguousarray(raw).view(np.uint8)
        return self._guards[a.dtype]

    def arm(self) -> None:
        """Write the guard pattern around every buffer, at every verification size."""
        self.staged = (None, {})
        for which in range(len(self.problems)):
            bufs = self.of(which)
            for a in self.template.arguments:
                if a.is_buffer:
                    g = bufs[a.name]
                    self.backend.upload(g.raw, self.guard(a))
                    self.backend.upload(g.raw, self.guard(a), GUARD_BYTES + g.nbytes)

    def restore(self, which: int, inputs: Inputs, wait: bool = True) -> None:
        """Copy the pristine inputs (uploaded once per input set) into the working buffers."""
        if which == 0:
            self.staged = (None, {})  # the timed launches' next one copies its whole set again
        bufs = self.of(which)
        for a in self.template.arguments:
            if a.is_buffer and a.name in inputs.host:
                g = bufs[a.name]
                if a.name not in inputs.device:
                    inputs.device[a.name] = self.backend.alloc(g.nbytes)
                    self.backend.upload(inputs.device[a.name], inputs.host[a.name])
                self.backend.copy(g.raw, inputs.device[a.name], g.nbytes, dst_offset=GUARD_BYTES, wait=wait)

    def poison(self, which: int, choose: Callable[[], str],
               plausible: Callable[[str], np.ndarray | None]) -> None:
        """Overwrite every output with a poison: `choose()` names it for each ("nan", "bits" or
        "plausible"), `plausible(name)` is another set's output of that name, if one was drawn."""
        bufs = self.of(which)
        for a in self.template.arguments:
            if not a.is_output or a.role == "inout":
                continue
            g = bufs[a.name]
            how = choose()
            other = plausible(a.name) if how == "plausible" else None
            if other is not None:
                poison = other
            elif how == "bits":
                poison = self.random_bits(which, a)
            elif a.dtype in TOLERANCE:
                poison = self.constant(which, a)
                self.backend.fill(g.raw, 0xFF, g.nbytes, GUARD_BYTES)
            else:
                poison = self.constant(which, a)
            if how != "nan" or a.dtype not in TOLERANCE:
                self.backend.copy(g.raw, self.resident(poison), g.nbytes, dst_offset=GUARD_BYTES)
            self.poisoned[(which, a.name)] = poison

    def resident(self, host: np.ndarray) -> Any:
        """A device copy of a host array that lives as long as the run (poisons, patterns),
        uploaded the first time it is asked for."""
        key = id(host)
        if key not in self._resident:
            buf = self.backend.alloc(host.nbytes)
            self.backend.upload(buf, host)
            self._resident[key] = (host, buf)  # the host array is held so its id stays unique
        return self._resident[key][1]

    def residents(self) -> list[tuple[np.ndarray, Any]]:
        """Every resident copy with its host array (engine/checks.py's `intact` compares them)."""
        return list(self._resident.values())

    def constant(self, which: int, a: Argument) -> np.ndarray:
        """All-ones bytes (NaN in every float format) for a float output; INT_POISON otherwise."""
        key = (which, a.name, "constant")
        if key not in self._bits:
            if a.dtype in TOLERANCE:
                self._bits[key] = np.full(self.nbytes(a, which), 0xFF, dtype=np.uint8)
            else:
                # the poison's bytes repeated: it fits an integer of every width (int8 ... uint64)
                self._bits[key] = (np.full(self.nbytes(a, which), INT_POISON & 0xFF, dtype=np.uint8)
                                   .view(np_dtype(a.dtype)).reshape(arg_shape(a, self.problems[which])))
        return self._bits[key]

    def random_bits(self, which: int, a: Argument) -> np.ndarray:
        key = (which, a.name)
        if key not in self._bits:
            self._bits[key] = self.rng.integers(0, 256, self.nbytes(a, which), dtype=np.uint8)
        return self._bits[key]

    def launched(self) -> None:
        """Count a launch: outputs read lazily before it cannot be read after it."""
        self.generation += 1

    def outputs(self, which: int) -> "Outputs":
        """The outputs of the latest launch at size `which`, read back when asked for."""
        return Outputs(self, which, self.generation)

    def download(self, which: int, name: str) -> np.ndarray:
        key = (which, name)
        if key not in self._host_out:
            a = next(x for x in self.template.arguments if x.name == name)
            self._host_out[key] = np.empty(arg_shape(a, self.problems[which]), dtype=np_dtype(a.dtype))
        self.backend.download(self.of(which)[name].raw, self._host_out[key], GUARD_BYTES)
        return self._host_out[key]

    def unwritten(self, which: int, a: Argument, out: np.ndarray, failing: Callable[[], int]) -> str:
        """Name the elements of a failed output that still hold the poison, if any do (`failing()`:
        how many of its elements fail)."""
        poison = self.poisoned.get((which, a.name))
        if poison is None or a.role == "inout" or poison.nbytes != out.nbytes:
            return ""
        item = out.dtype.itemsize
        kind = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}.get(item)
        if kind is None:
            return ""
        same = np.flatnonzero(out.ravel().view(kind) == np.ascontiguousarray(poison).ravel().view(kind))
        # a few wrong values may equal the poison by chance: name them unwritten only when they
        # are most of the elements that fail
        if same.size < UNWRITTEN_MIN or same.size < 0.5 * failing():
            return ""
        return (f"{a.name}: {same.size} of {out.size} elements were never written (they still hold the "
                f"poison written before the launch); first at {int(same[0])}")

    # the timed launches, at the tuning size (0) -------------------------------------------------------
    def copy_runs(self, sources: Mapping[str, Any], change: Mapping[str, tuple[int, int, int]], source: int) -> None:
        """Queue, without waiting, a copy of each changed run into the tuning size's buffers from
        `sources` (at the run's own place for source 0, the pristine set; at the values' place for 1)."""
        bufs = self.of(0)
        for name, spot in change.items():
            at, count = spot[0], spot[2]
            item = self._items[name]
            src = spot[source] * item
            self.backend.copy(bufs[name].raw, sources[name], count * item, dst_offset=GUARD_BYTES + at * item,
                              src_offset=src, wait=False)

    def timing_poisons(self, plausible: Callable[[str], np.ndarray | None]) -> dict[str, list[tuple[str, Any, np.ndarray]]]:
        """Device copies of each output's poisons at the tuning size, made once per run."""
        if self._timing_poison is None:
            bufs = self.of(0)
            self._timing_poison = {}
            for a in self.template.arguments:
                if not a.is_output or a.role == "inout":
                    continue
                nbytes = bufs[a.name].nbytes
                fill = np.full(nbytes, 0xFF if a.dtype in TOLERANCE else 0xA5, dtype=np.uint8)
                choices: list[tuple[str, Any, np.ndarray]] = [("nan", None, fill)]
                for name, host in (("bits", self.random_bits(0, a)), ("plausible", plausible(a.name))):
                    if host is not None:
                        buf = self.backend.alloc(nbytes)
                        self.backend.upload(buf, host)
                        choices.append((name, buf, host))
                self._timing_poison[a.name] = choices
        return self._timing_poison

    def repoison(self, poisons: Mapping[str, list[tuple[str, Any, np.ndarray]]]) -> None:
        """Queue, without waiting, the poison of every output before a timed launch."""
        bufs = self.of(0)
        for a in self.template.arguments:
            if a.is_buffer and a.name in poisons:
                g = bufs[a.name]
                kind, buf, host = poisons[a.name][int(self.rng.integers(len(poisons[a.name])))]
                if buf is None:
                    self.backend.fill(g.raw, int(host[0]), g.nbytes, GUARD_BYTES, wait=False)
                else:
                    self.backend.copy(g.raw, buf, g.nbytes, dst_offset=GUARD_BYTES, wait=False)
                self.poisoned[(0, a.name)] = host


class Outputs(abc.Mapping):
    """The outputs of the latest launch, downloaded from the device the first time each is asked
    for; asking after another launch is a mistake in kerntune, and says so."""

    def __init__(self, buffers: GuardedBuffers, which: int, generation: int):
        self._buffers, self._which, self._generation = buffers, which, generation
        self._names = [a.name for a in buffers.template.arguments if a.is_output]
        self._host: dict[str, np.ndarray] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._host:
            if name not in self._names:
                raise KeyError(name)
            if self._buffers.generation != self._generation:
                raise RuntimeError(f"outputs of an earlier launch read after launch {self._buffers.generation}")
            self._host[name] = self._buffers.download(self._which, name)
        return self._host[name]

    def __iter__(self):
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def out_of_bounds(a: Argument, nbytes: int, side: str, changed: np.ndarray) -> str:
    """What a changed guard region says, in one line: how many bytes, which side, the first element."""
    item = np_dtype(a.dtype).itemsize
    n = nbytes // item
    if side.startswith("before"):
        first = int(changed[0]) - GUARD_BYTES  # negative: bytes before the start
        element = f"element {first // item}"
    else:
        first = int(changed[0])
        element = f"element {n + first // item}"
    return (f"the kernel wrote out of bounds: {changed.size} bytes {side} of `{a.name}` "
            f"({n} elements) changed, the first at {element}")
