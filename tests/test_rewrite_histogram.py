"""The histogram rewrite (agents/rewrite_histogram.py): threads counting elements into bins by atomic
adds get the bins privatised per block (PRIVATE), ITEMS elements per thread (STRIDED or
consecutive) and GRID blocks per multiprocessor; bins privatised already get the elements. What it
must prove, and the reason it gives where it cannot."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kerntune.agents.cooperate import Decline
from kerntune.agents.kernel_tree import classify
from kerntune.agents.rewrite_histogram import read
from kerntune.agents.rewrites import RewriteContext
from kerntune.agents.rules import rules_template
from kerntune.engine.device import DeviceLimits
from kerntune.engine.expressions import parse as parse_expression
from kerntune.engine.proposal import original_launch
from kerntune.engine.template import load_template
from rewrite_support import gated_on_pocl

NAIVE = Path(__file__).resolve().parent / "data" / "naive"
CPU = DeviceLimits("opencl", "cpu", max_threads_per_block=4096, warp_size=1, sm_count=2, max_shared_per_block=65536)
GPU = DeviceLimits("cuda", "gpu", max_threads_per_block=1024, warp_size=32, sm_count=132, max_shared_per_block=49152)


def context(source: str, backend: str = "cuda", **spec) -> RewriteContext:
    """The naive histogram's spec (data, bins, n) for `source`'s kernel `k`."""
    t = replace(load_template(NAIVE / "histogram"), entry="k", **spec)
    limits = GPU if backend == "cuda" else CPU
    grid, block = original_launch(t, limits)
    return RewriteContext(t, backend, source, classify(source, "k"), tuple(grid), tuple(block), {}, limits)


def test_a_naive_histogram_is_privatised_gated_and_reproduced_on_pocl(tmp_path, opencl_backend):
    original = load_template(NAIVE / "histogram")
    made = rules_template(original, "opencl", CPU)
    assert [r.name for r in made.applied.rewrites] == ["histogram"], made.why_none()
    assert {"PRIVATE", "COPIES", "ITEMS", "STRIDED", "GRID", "THREADS"} <= {p.name for p in made.proposal.parameters}
    template, ev = gated_on_pocl(original, made.proposal, tmp_path, CPU, opencl_backend)
    # every switch away from its default at once (the published letter histograms, slow, try others)
    config = {"PRIVATE": 1, "COPIES": 4, "ITEMS": 4, "STRIDED": 0, "GRID": 1, "THREADS": 64}
    ok, _, message = ev.reproduces_original({**template.default_config(), **config}, (3,))
    assert ok, message


def test_the_cuda_histogram_compiles_with_every_switch_on(tmp_path, monkeypatch):
    """Shared atomics through the element's function (a generic pointer to the shared bins) build."""
    from kerntune.engine.backends import cuda_toolchain as cuda

    if cuda.find_nvcc() is None:
        pytest.skip("nvcc not found")
    monkeypatch.setenv("KERNTUNE_CACHE_DIR", str(tmp_path))
    made = rules_template(load_template(NAIVE / "histogram"), "cuda", GPU)
    config = {p.name: p.default for p in made.proposal.parameters}
    config.update(PRIVATE=1, COPIES=8, ITEMS=8, STRIDED=0, GRID=4, THREADS=512)
    cubin, info, _ = cuda.compile_cubin(made.proposal.sources["cuda"], "histogram", {k: str(v) for k, v in config.items()})
    assert cubin and info.get("spill_stores", 0) == 0, info


GRID_STRIDE = """__global__ void k(const unsigned char *data, unsigned int *bins, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        unsigned char b = data[i];
        if (b == 0) continue;
        atomicAdd(bins + b, 1u);
    }
}
"""


def test_a_grid_stride_loop_over_the_elements_counts_each_element_as_a_function_of_it():
    """The loop's body as one element's function: a `continue` ends that element alone; `bins + b`
    is the element `bins[b]`."""
    h = read(context(GRID_STRIDE))
    assert (h.form, h.var, h.bound, h.bins, h.private, h.extent) == ("grid-stride", "i", "n", "bins", False, 256)
    assert "int i = kt_i;" in h.counting and "do {" in h.counting and "while (0);" in h.counting


ONE = """__global__ void k(const unsigned char *data, unsigned int *bins, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        BODY
    }
}
"""


@pytest.mark.parametrize("body, why", [
    ("unsigned int old = atomicAdd(&bins[data[i]], 1u); if (old == 0) bins[0] = 1u;", "result of its `atomicAdd` is used"),
    ("atomicMax(&bins[data[i]], 1u);", "is no add"),
    ("atomicAdd(&bins[blockIdx.x % 4 * 64 + data[i] % 64], 1u);", "reads thread or block ids other than"),
    ("atomicAdd(&bins[threadIdx.x % 8], 1u);", "reads thread or block ids other than"),
    ("atomicAdd(&bins[data[i]], 1u); bins[0] = 0u;", "writes `bins\\[0\\]` other than by an atomic add"),
    ("atomicAdd(&bins[data[i]], 1u); ((unsigned char *)data)[i] = 0;", "writes `data\\[i\\]` other than"),
    ("for (int j = i; j < n; j += 7) { atomicAdd(&bins[data[j]], 1u); __syncthreads(); }",
     "barrier inside a loop"),
    # a bin read besides its add would read the block's own count once privatised
    ("if (bins[0] < 100u) atomicAdd(&bins[data[i]], 1u);", "reads `bins\\[0\\]` other than as an atomic add's bin"),
    ("atomicAdd(&bins[bins[1] % 4], 1u);", "reads `bins\\[1\\]`"),
])
def test_a_counting_that_is_no_function_of_its_element_into_one_array_of_bins_is_declined(body, why):
    with pytest.raises(Decline, match=why):
        read(context(ONE.replace("BODY", body)))


def test_a_grid_that_covers_fewer_threads_than_elements_is_declined():
    """ceil_div(n, 512) blocks of 256 threads count the first half: the rewrite would count all."""
    t = load_template(NAIVE / "histogram")
    source = t.source_for("cuda").replace("histogram(", "k(")
    with pytest.raises(Decline, match="fewer than the"):
        read(context(source, grid=(parse_expression("ceil_div(n, 512)"),)))


def test_bins_counted_by_a_problem_size_are_not_privatised_and_say_why():
    """A shape the spec sizes by a problem size no scalar argument gives the kernel cannot size a
    shared copy of the bins, nor one whose largest count outgrows the shared memory: PRIVATE is not
    offered; the elements per thread still are."""
    from kerntune.agents.rewrite_histogram import rewrite

    t = load_template(NAIVE / "histogram")
    source = t.source_for("cuda").replace("histogram(", "k(")
    for shape, why in (("2 * n", "no scalar argument gives the kernel"), ("n", "exceed the device's shared memory")):
        args = tuple(replace(a, shape=(parse_expression(shape),)) if a.name == "bins" else a for a in t.arguments)
        ctx = context(source, arguments=args)
        h = read(ctx)
        assert h.extent is None and why in h.no_private
        r = rewrite(ctx)
        assert "PRIVATE" not in {p.name for p in r.parameters} and "ITEMS" in {p.name for p in r.parameters}
        assert "bins left global" in r.description


FLOAT = """KERNEL void k(GLOBAL const unsigned char *data, GLOBAL float *bins, int n) {
    int i = ID;
    if (i < n) ADD;
}
"""


def test_float_bins_are_summed_in_another_order_in_cuda_and_declined_in_opencl():
    cuda = FLOAT.replace("KERNEL", "__global__").replace("GLOBAL ", "").replace(
        "ID", "blockIdx.x * blockDim.x + threadIdx.x").replace("ADD", "atomicAdd(&bins[data[i]], 0.5f)")
    from kerntune.agents.rewrite_histogram import rewrite
    r = rewrite(context(cuda))
    assert "summed in another order" in r.description
    opencl = FLOAT.replace("KERNEL", "__kernel").replace("GLOBAL", "__global").replace(
        "ID", "get_global_id(0)").replace("ADD", "atomic_add(&bins[data[i]], 1)")
    with pytest.raises(Decline, match="bins are of type `float`"):
        read(context(opencl, "opencl"))


PRIVATISED = """__global__ void k(const unsigned char *data, unsigned int *bins, int n) {
    __shared__ unsigned int s[256];
    for (int b = threadIdx.x; b < 256; b += blockDim.x) s[b] = 0;
    __syncthreads();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&s[data[i]], 1u);
    __syncthreads();
    for (int b = threadIdx.x; b < 256; b += blockDim.x) {
        unsigned int v = s[b];
        if (v != 0) MERGE;
    }
}
"""


def test_shared_bins_counted_by_the_blocks_own_atomics_are_read():
    """`atomicAdd_block` on the block's shared bins: an add, scoped to the block that owns them."""
    h = read(context(PRIVATISED.replace("atomicAdd(&s[data[i]], 1u)", "atomicAdd_block(&s[data[i]], 1u)")
                     .replace("MERGE", "atomicAdd(&bins[b], v)")))
    assert h.private and h.bins == "s"


@pytest.mark.parametrize("merge, why", [
    ("atomicAdd(&bins[b], v)", None),
    ("atomicAdd(&bins[blockIdx.x * 256 + b], v)", "reads the block's index"),
    ("atomicAdd(&bins[b], v > 5 ? v : 0u)", "not the bin of `s` as read"),
    ("atomicAdd(&bins[(b + 1) % 256], v)", "not the bin it reads"),
])
def test_a_privatised_histogram_merges_each_bin_as_read_or_is_declined(merge, why):
    """More elements a block change what each block's bins hold, never their sum over the blocks:
    only where the merge adds each bin, as read, at its own index, from no block's index."""
    source = PRIVATISED.replace("MERGE", merge)
    if why is None:
        h = read(context(source))
        assert h.private and (h.bins, h.target, h.extent) == ("s", "bins", 256)
    else:
        with pytest.raises(Decline, match=why):
            read(context(source))
    with pytest.raises(Decline, match="more than its being non-zero"):
        read(context(PRIVATISED.replace("v != 0", "v > 5").replace("MERGE", "atomicAdd(&bins[b], v)")))


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["histogram", "image_histogram"])
def test_on_cuda_the_naive_histogram_gates_and_its_switches_reproduce_the_original(name, tmp_path):
    """Shared atomics on the device, blocks of several warps merging their bins, a grid-stride
    block loop: each configuration counts what the original counts, and a short tune verifies."""
    from rewrite_support import gates_and_tunes_on_cuda

    from kerntune.engine.backends import open_backend
    from kerntune.engine.evaluate import Evaluator, TimingPolicy
    from kerntune.engine.gate import check_proposal
    from kerntune.engine.tune import resolve_device

    _, limits = resolve_device("cuda", 0)
    original = load_template(NAIVE / name)
    made = rules_template(original, "cuda", limits)
    assert [r.name for r in made.applied.rewrites] == ["histogram"], made.why_none()
    gates_and_tunes_on_cuda(original, made.proposal, tmp_path, limits)
    verdict = check_proposal(original, made.proposal, tmp_path / "again", backend="cuda", device=0,
                             problem=original.problem("small", {}), limits=limits, timeout=300)
    template = verdict.template
    backend = open_backend("cuda", 0)
    try:
        ev = Evaluator(backend, template, template.problem("small", {}), seed=1,
                       timing=TimingPolicy(warmup=1, min_repeats=3, max_repeats=3, target_s=0.002))
        for config in ({"PRIVATE": 1}, {"PRIVATE": 1, "COPIES": 32, "ITEMS": 16, "GRID": 4, "THREADS": 1024},
                       {"PRIVATE": 1, "ITEMS": 8, "STRIDED": 0, "GRID": 1, "THREADS": 64},
                       {"ITEMS": 4, "GRID": 2}):
            ok, _, message = ev.reproduces_original({**template.default_config(), **config}, (3, 4))
            assert ok, (config, message)
    finally:
        backend.close()


BOOK = Path(__file__).resolve().parent / "data" / "published" / "byexample"
# the book's shared bins (byexample/histo.cu's histo_shared_kernel: a bin a thread, 256 threads and
# 256 bins, a while loop over the grid's stride), and the same in OpenCL
BY_EXAMPLE_CL = """__kernel void k(__global const uchar *buffer, long size, __global uint *histo) {
    __local uint temp[256];
    temp[get_local_id(0)] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    int i = get_global_id(0);
    int offset = get_global_size(0);
    while (i < size) {
        atomic_inc(&temp[buffer[i]]);
        i += offset;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    atomic_add(&histo[get_local_id(0)], temp[get_local_id(0)]);
}
"""


def book(backend: str = "cuda", change: tuple[str, str] = ("", ""), **spec) -> RewriteContext:
    """The book's shared-bins kernel (its spec: buffer, size, histo), `change` made to its source."""
    t = replace(load_template(BOOK / "histo_shared.toml"), **spec)
    source = t.source_for("cuda") if backend == "cuda" else BY_EXAMPLE_CL.replace("void k(", f"void {t.entry}(")
    source = source.replace(*change) if change[0] else source
    limits = GPU if backend == "cuda" else CPU
    grid, block = original_launch(t, limits)
    return RewriteContext(t, backend, source, classify(source, t.entry), tuple(grid), tuple(block), {}, limits)


@pytest.mark.parametrize("backend", ["cuda", "opencl"])
def test_a_bin_a_thread_and_a_while_loop_over_the_grids_stride_are_read(backend):
    """The thread's own bin zeroed and merged (its block of 256 threads is the 256 bins), the loop's
    stride a local made from the launch: the element's function keeps neither."""
    h = read(book(backend))
    assert (h.form, h.var, h.bound, h.bins, h.target, h.private, h.extent) == \
        ("grid-stride", "i", "size", "temp", "histo", True, 256)
    assert "offset" not in h.counting and "int i = kt_i;" in h.counting


@pytest.mark.parametrize("change, why", [
    (("i += offset;", "i += blockDim.x;"), "not the grid's threads"),
    (("atomicAdd(&temp[buffer[i]], 1);", "if (buffer[i] == 0) { i += offset; continue; } atomicAdd(&temp[buffer[i]], 1);"),
     "changes `i`"),
    (("atomicAdd(&temp[buffer[i]], 1);", "atomicAdd(&temp[(buffer[i] + offset) % 256], 1);"), "made from thread ids"),
    (("while (i < size) {\n        atomicAdd(&temp", "while (i < size && buffer[i] != 0) {\n        atomicAdd(&temp"),
     "not `i < n`"),
    (("temp[threadIdx.x] = 0;", "temp[threadIdx.x] = 1;"), "does not set each bin"),
])
def test_a_while_loop_that_is_no_grid_stride_over_the_elements_is_declined(change, why):
    with pytest.raises(Decline, match=why):
        read(book(change=change))


def test_a_bin_a_thread_needs_as_many_threads_as_bins():
    """128 threads zero and merge 128 of the 256 bins: the original leaves the rest to chance."""
    with pytest.raises(Decline, match="block's 128 threads are not its 256 bins"):
        read(book(block=(parse_expression("128"),)))


CHUNK = """__global__ void k(const unsigned char *data, unsigned int *bins, int n) {
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    for (int i = tid * 4; i < min((tid + 1) * 4, n); ++i) atomicAdd(&bins[data[i]], 1u);
}
"""


def test_a_threads_chunk_of_consecutive_elements_is_read_where_the_grid_covers_it():
    h = read(context(CHUNK))
    assert (h.form, h.var, h.bound) == ("chunk", "i", "n")
    with pytest.raises(Decline, match="fewer than the"):
        read(context(CHUNK.replace("tid * 4", "tid * 2").replace("* 4, n)", "* 2, n)"),
                     grid=(parse_expression("ceil_div(n, 1024)"),)))
    with pytest.raises(Decline, match="nor over the thread's chunk"):
        read(context(CHUNK.replace("min((tid + 1) * 4, n)", "min((tid + 2) * 4, n)")))


def test_the_elements_function_declares_the_kernels_parameters_without_their_comments():
    """`const unsigned char *data, // the text` then the bins on the next line: a comment between
    parameters would swallow the next one on the function's one line."""
    source = ("__global__ void k(const unsigned char *data, // the text\n    unsigned int *bins, /* 256 */ int n) {\n"
              "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) atomicAdd(&bins[data[i]], 1u);\n}\n")
    from kerntune.agents.rewrite_histogram import rewrite

    made = rewrite(context(source))
    line = next(x for x in made.source.splitlines() if "void kt_count(" in x)
    assert line.endswith("kt_count(const unsigned char *data, unsigned int *bins, int n, const int kt_i)")


def test_a_thread_per_pixel_of_a_two_dimensional_launch_counts_a_flat_index_over_the_pixels():
    """`x < width && y < height`: the elements are the width * height pixels, x = i % width and
    y = i / width; the new launch is one-dimensional, the lifted 2-D block held while it runs."""
    original = load_template(NAIVE / "image_histogram")
    made = rules_template(original, "cuda", GPU)
    assert [r.name for r in made.applied.rewrites] == ["histogram"], made.why_none()
    source = made.proposal.sources["cuda"]
    assert "int x = kt_i % (width);" in source and "int y = kt_i / (width);" in source
    assert made.proposal.block[1].startswith("1 if ") and made.proposal.grid[1].startswith("1 if ")
    assert any(c.endswith("or BLOCK_Y == 16") for c in made.proposal.constraints)
    t = replace(original, entry="k")
    one_axis = original.source_for("cuda").replace("image_histogram(", "k(").replace(" && y < height", "")
    grid, block = original_launch(t, GPU)
    ctx = RewriteContext(t, "cuda", one_axis, classify(one_axis, "k"), tuple(grid), tuple(block), {}, GPU)
    with pytest.raises(Decline, match="no guard `if \\(x < n && y < n\\)`"):
        read(ctx)


def test_the_image_histogram_reproduces_the_original_on_pocl(tmp_path, opencl_backend):
    original = load_template(NAIVE / "image_histogram")
    made = rules_template(original, "opencl", CPU)
    template, ev = gated_on_pocl(original, made.proposal, tmp_path, CPU, opencl_backend)
    for config in ({"PRIVATE": 1, "COPIES": 2, "ITEMS": 4, "THREADS": 64}, {"ITEMS": 2, "STRIDED": 0, "GRID": 1}):
        ok, _, message = ev.reproduces_original({**template.default_config(), **config}, (3,))
        assert ok, (config, message)


def test_the_shared_bins_are_counted_in_their_own_bytes():
    """256 bins of unsigned long long: 2 KiB a copy of them, the constraint says so."""
    from kerntune.agents.rewrite_histogram import rewrite

    wide = ONE.replace("unsigned int *bins", "unsigned long long *bins").replace(
        "BODY", "atomicAdd(&bins[data[i]], 1ull);")
    made = rewrite(context(wide))
    assert "PRIVATE == 0 or COPIES * 2048 <= max_shared_per_block" in made.constraints


SCALAR_BINS = {"kernel.cl": """__kernel void histogram(__global const uchar *data, __global uint *bins, int n, int nbins) {
    int i = get_global_id(0);
    if (i < n) atomic_inc(&bins[data[i] % nbins]);
}
""", "reference.py": """import numpy as np


def reference(inputs, sizes):
    counts = np.bincount(inputs["data"].astype(np.int64) % sizes["nbins"], minlength=sizes["nbins"])
    return {"bins": inputs["bins"].astype(np.int64) + counts}
"""}


def test_bins_a_scalar_argument_counts_are_privatised_up_to_the_specs_largest_count(tmp_path, opencl_backend):
    """`nbins` bins, the spec's sizes asking 10 and 48: a shared copy of 48; a size asking more
    (200, no size of the spec) counts on the global bins and stays right."""
    spec = (NAIVE / "histogram" / "kernel.toml").read_text().replace('shape = [256]', 'shape = ["nbins"]')
    spec = spec.replace('sources = { cuda = "kernel.cu", opencl = "kernel.cl" }', 'sources = { opencl = "kernel.cl" }')
    spec = spec.replace('[[problem]]\nname = "small"\nn = 20011', '[[arg]]\nname = "nbins"\ndtype = "int32"\n'
                        'role = "scalar"\nvalue = "nbins"\n\n[[problem]]\nname = "small"\nn = 20011\nnbins = 48')
    spec = spec.replace('name = "64M"\nn = 67108864', 'name = "64M"\nn = 67108864\nnbins = 48')
    spec = spec.replace('name = "odd"\nn = 5001', 'name = "odd"\nn = 5001\nnbins = 10')
    (tmp_path / "spec").mkdir()
    (tmp_path / "spec" / "kernel.toml").write_text(spec)
    for name, text in SCALAR_BINS.items():
        (tmp_path / "spec" / name).write_text(text)
    original = load_template(tmp_path / "spec")
    made = rules_template(original, "opencl", CPU)
    assert [r.name for r in made.applied.rewrites] == ["histogram"], made.why_none()
    assert "room for 48" in made.applied.rewrites[0].description
    template, ev = gated_on_pocl(original, made.proposal, tmp_path, CPU, opencl_backend)
    config = {**template.default_config(), "PRIVATE": 1, "COPIES": 2, "ITEMS": 2}
    ok, _, message = ev.reproduces_original(config, (3,))
    assert ok, message
    from kerntune.engine.evaluate import Evaluator, TimingPolicy

    more = Evaluator(opencl_backend, template, template.problem("small", {"nbins": 200}), seed=1,
                     timing=TimingPolicy(warmup=1, min_repeats=3, max_repeats=3, target_s=0.002))
    ok, _, message = more.reproduces_original(config, (3,))
    assert ok, message


def test_bins_a_scalar_argument_counts_get_a_shared_copy_of_their_largest_count():
    """The spec's shape of the bins the value of the kernel's `n`: room for the largest n of the
    spec's sizes where that fits (here a spec of small sizes), a block past it on the global bins."""
    from kerntune.agents.rewrite_histogram import rewrite

    t = load_template(NAIVE / "histogram")
    source = t.source_for("cuda").replace("histogram(", "k(")
    args = tuple(replace(a, shape=(parse_expression("n"),)) if a.name == "bins" else a for a in t.arguments)
    ctx = context(source, arguments=args, problems=t.problems[:1])  # n = 20011: 80 KB
    assert read(ctx).no_private.startswith("the 20011 bins' 80044 bytes exceed")
    ctx = context(source, arguments=args, problems=(), verify_problems=t.verify_problems)  # n = 5001
    h = read(ctx)
    assert (h.extent, h.count) == (5001, "n")
    made = rewrite(ctx)
    assert "const bool kt_fits = (long)(n) <= 5001;" in made.source and "if (kt_fits) kt_count(" in made.source
