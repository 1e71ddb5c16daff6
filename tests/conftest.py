"""Shared test setup: a private cache directory, and `gpu` tests skipped without a CUDA device."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"


def _cuda_device() -> bool:
    try:
        from kerntune.engine.backends import cuda

        return cuda.device_count() > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if _cuda_device():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    cache = tmp_path_factory.getbasetemp() / "kerntune-cache"
    monkeypatch.setenv("KERNTUNE_CACHE_DIR", str(cache))


@pytest.fixture(scope="session")
def opencl_backend():
    pytest.importorskip("pyopencl")
    from kerntune.engine.backends import BackendError, open_backend

    try:
        b = open_backend("opencl")
    except BackendError as e:
        pytest.skip(f"no OpenCL device: {e}")
    yield b
    b.close()


@pytest.fixture
def hostile_dir(tmp_path):
    d = tmp_path / "hostile"
    shutil.copytree(DATA / "hostile", d)
    return d


needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
