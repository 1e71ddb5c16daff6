"""`--backend auto` says why it did not choose CUDA."""

from __future__ import annotations

import importlib.util

import pytest

from kerntune.engine.backends import auto_backend
from kerntune.engine.events import Note
from kerntune.engine.template import load_template
from kerntune.engine.tune import TuneOptions, TuneRun
from kerntune import templates

no_pycuda = pytest.mark.skipif(importlib.util.find_spec("pycuda") is not None, reason="pycuda is installed here")


@no_pycuda
def test_auto_says_cuda_was_skipped_for_want_of_pycuda(tmp_path):
    pytest.importorskip("pyopencl")
    name, why = auto_backend()
    assert name == "opencl"
    assert why.startswith("--backend auto: CUDA skipped: pycuda is not available") and "kerntune[cuda]" in why
    notes: list[str] = []
    run = TuneRun(load_template(templates.path("vector_add")),
                  TuneOptions(backend="auto", budget=1, probe=False, overrides={"n": 1000},
                              session_path=tmp_path / "s.toml"),
                  [lambda ev: notes.append(ev.text) if isinstance(ev, Note) else None])
    run.run()
    assert why in notes  # said in the run, and so in its session


@pytest.mark.parametrize("module", ["cuda", "opencl"])
def test_each_backend_declares_exactly_the_optional_methods_it_has(module):
    from dataclasses import fields

    from kerntune.engine.backends import Capabilities, cuda, opencl

    cls = {"cuda": cuda.CUDABackend, "opencl": opencl.OpenCLBackend}[module]
    declared = cls.capabilities
    assert isinstance(declared, Capabilities)
    for f in fields(Capabilities):
        assert getattr(declared, f.name) == callable(getattr(cls, f.name, None)), f.name
    assert declared.build == declared.warm == (module == "cuda")
