"""The kernel model (agents/model.py): loops with roles, accesses as affine forms over thread, block
and loop indices, barriers, shared arrays, atomics, gathers; the named kernel and what it calls only."""

from __future__ import annotations

import pytest

from kerntune.agents.model import ModelError, Poly, Slope, build

MATMUL = r'''
#define TILE 16
__device__ float twice(float v) { return 2.0f * v; }
__global__ void other(float *p) { __shared__ float s[64]; p[threadIdx.x] = s[0]; __syncthreads(); }
__global__ void mm(const float *A, const float *B, float *C, int N) {
    __shared__ float As[TILE][TILE], Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < N / TILE; ++t) {
        As[threadIdx.y][threadIdx.x] = A[row * N + t * TILE + threadIdx.x];
        Bs[threadIdx.y][threadIdx.x] = B[(t * TILE + threadIdx.y) * N + col];
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    C[row * N + col] = twice(acc);
}
'''

REDUCE = r'''
__kernel void sum(__global const float *x, __global float *out, int n, __local float *scratch) {
    int lid = get_local_id(0);
    float acc = 0.0f;
    for (int i = get_global_id(0); i < n; i += get_global_size(0)) acc += x[i];
    scratch[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = get_local_size(0) / 2; s > 0; s >>= 1) {
        if (lid < s) scratch[lid] += scratch[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) atomic_add(&out[0], scratch[0]);
}
'''

GATHER = r'''
// a row of the table per token: é, a comment past ASCII before the kernel
__global__ void emb(float *out, const int *ids, const float *table, int dim) {
    int t = blockIdx.x;
    for (int c = threadIdx.x; c < dim; c += blockDim.x) out[t * dim + c] = table[ids[t] * dim + c];
}
'''


def access(m, array, write=None):
    return [a for a in m.accesses if a.array == array and (write is None or a.write == write)]


def test_a_tiled_contraction_reads_as_its_loop_nest_with_affine_accesses_and_shared_tiles():
    m = build(MATMUL, "mm")
    assert m.name == "mm" and [f.name for f in m.functions] == ["mm", "twice"]  # never `other`
    assert sorted(m.launch_dims) == [0, 1]
    t, k = m.loops
    assert (t.var, t.role, t.parent, k.var, k.parent, k.trip) == ("t", "serial", None, "k", 0, None)
    assert str(t.bound_form) == "N / TILE"  # a quotient that holds still is a name of its own
    [a] = access(m, "A")
    assert a.expr.slope("t") == Poly.of("TILE") and a.expr.slope("threadIdx.x") == Poly.of(1)
    assert a.expr.slope("threadIdx.y") == Poly.of("N") and a.loop == 0 and a.space == "global"
    [as_read] = access(m, "As", write=False)
    assert as_read.space == "shared" and as_read.expr.shared_by(0)  # a row of the tile, every thread in x
    assert str(as_read.expr.affine) == "k + (TILE) * threadIdx.y"
    [bs_read] = access(m, "Bs", write=False)
    assert not bs_read.expr.shared_by(0) and bs_read.expr.slope("k") == Poly.of("TILE")
    assert [b.loop for b in m.barriers] == [0, 0] and all(b.scope == "block" for b in m.barriers)
    assert [(s.name, s.dims, s.bytes) for s in m.shared_arrays()] == [("As", ("TILE", "TILE"), 1024),
                                                                     ("Bs", ("TILE", "TILE"), 1024)]
    assert m.shared_bytes() == 2048 and m.cooperates
    [acc] = m.accumulators
    assert (acc.var, acc.op, acc.loop, acc.ctype) == ("acc", "sum", 1, "float")
    assert m.nest(1) == (t, k)


def test_a_tree_reduction_in_local_memory_and_an_atomic_are_seen_in_opencl():
    m = build(REDUCE)
    grid, tree = m.loops
    assert (grid.role, grid.dim, tree.role, tree.halving) == ("grid-stride", 0, "tree", True)
    assert str(grid.start_form) == "(blockDim.x) * blockIdx.x + threadIdx.x"
    assert {a.space for a in access(m, "scratch")} == {"shared"}  # a __local workspace argument
    [partner] = [a for a in access(m, "scratch") if a.index == "lid + s"]
    assert partner.expr.slope("s") == Poly.of(1) and partner.loop == 1
    assert [b.loop for b in m.barriers] == [None, 1]
    assert [(c.name, c.array) for c in m.atomics] == [("atomic_add", "out")]


def test_a_gather_is_an_index_that_is_data_and_spans_are_bytes():
    m = build(GATHER)
    [loop] = m.loops
    assert (loop.role, loop.dim) == ("thread-stride", 0)
    [table] = access(m, "table")
    assert table.expr.affine is None and table.expr.loads == ("ids",)
    [out] = access(m, "out")
    assert out.expr.slope("c") == Poly.of(1) and out.expr.slope("blockIdx.x") == Poly.of("dim")
    raw = GATHER.encode()
    assert raw[out.span.start:out.span.end] == b"out[t * dim + c]"  # past the é: bytes, not characters


def test_a_kernel_that_is_not_there_is_one_error_naming_those_that_are():
    with pytest.raises(ModelError, match="no kernel named nope .the source has other, mm"):
        build(MATMUL, "nope")


ROWS = r'''
// “row” sums — a comment in UTF-8 before the kernel
__global__ void rows(const float *x, float *y, int n, int c) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < n) {
        float s = 0.0f;
        for (int j = 0; j < c; ++j) s += x[r * c + j];
        y[r] = s;
    }
}
'''


def test_the_kernel_trees_loops_accesses_and_accumulators_are_the_models_in_bytes():
    from kerntune.agents.kernel_tree import classify, source_tokens, span_of, syntax_nodes
    from kerntune.agents.syntax import cut

    a, m = classify(ROWS), build(ROWS)
    raw = ROWS.encode()
    assert a.kind == "rowwise" and [lp.role for lp in a.loops] == [lp.role for lp in m.loops] == ["serial"]
    assert [(x.array, x.index, x.loop) for x in a.accesses] == [(x.array, x.index, x.loop) for x in m.accesses]
    assert [(s.var, s.op, s.loop) for s in a.accumulators] == [(s.var, s.op, s.loop) for s in m.accumulators]
    assert a.loops[0].span == m.loops[0].span and a.body == m.kernel.body
    assert raw[a.accesses[0].span.start:a.accesses[0].span.end] == b"x[r * c + j]"
    # the syntax helpers' spans are bytes too (the comment's quotes and dash take more bytes than
    # characters), and `cut` gives a span's text
    assert cut(ROWS, a.accesses[0].span.start, a.accesses[0].span.end) == "x[r * c + j]"
    assert ROWS.index("x[r * c + j]") < a.accesses[0].span.start
    (node, _), = [(n, t) for n, t in syntax_nodes(ROWS, ("subscript_expression",)) if t(n) == "x[r * c + j]"]
    assert span_of(ROWS, node) == a.accesses[0].span
    assert [sp for w, sp in source_tokens(ROWS) if w == "x"][-1].start == a.accesses[0].span.start


def test_a_loop_over_a_tiles_row_or_a_packs_members_indexes_a_register_array_and_a_cast_pointer_is_an_access():
    m = build(r'''
struct pack { float v[4]; };
__global__ void k(const float *x, float *y, int n) {
    __shared__ float tile[32][33];
    const pack *p = reinterpret_cast<const pack *>(x);
    for (int j = 0; j < 32; j += 8) tile[threadIdx.y + j][threadIdx.x] = x[j];
    for (int i = 0; i < n; ++i) {
        pack q = p[i];
        for (int e = 0; e < 4; ++e) y[e] += q.v[e];
    }
}
''')
    by_var = {lp.var: lp for lp in m.loops}
    assert by_var["j"].register_index and not by_var["j"].hot  # tile[threadIdx.y + j]: the row's index
    assert by_var["e"].register_index  # q.v[e]: a member array of a thread's own
    assert by_var["i"].accesses > 0 and by_var["i"].hot and not by_var["i"].register_index  # p[i] reads x


AROUND = r'''
__device__ void bump(int *h, int k) { atomicAdd(&h[k], 1); }
__global__ void k(float *out, const float *x, int *hist, float *keep, int n) {
    int i = blockIdx.x * 128 + threadIdx.x;
    if (n <= i) return;
    const float *xi = x + i;
    const float4 *packs = reinterpret_cast<const float4 *>(x);
    float *where = &keep[i];
    out[i] = *xi + packs[0].x + where[0];
    bump(hist, i / 4);
}
'''


def test_the_model_tells_aliases_what_escapes_the_guard_and_a_literal_block():
    m = build(AROUND, "k")
    assert m.aliases == {"xi": ("x", "i")} and m.casts == {"packs": ("x",), "where": ("keep",)}
    # the cast, the element's address taken and the call's argument, but not the alias's reads
    assert set(m.opaque) == {"x", "keep", "hist"}
    assert (m.guard.var, m.guard.bound, m.guard.form) == ("i", "n", "return")
    (t,) = m.thread_indices
    assert not t.is_global and t.fixed[0] == 128 and AROUND.encode()[t.fixed[1].start:t.fixed[1].end] == b"128"
    assert m.arg_types["out"] == "float" and m.arg_types["hist"] == "int"
    assert m.slope("i / 4", "i") == Slope(0, (("i", "4"),))
    assert m.slope("2 * i", "i").slope is None and m.inline("i + 1") == "(blockIdx.x * 128 + threadIdx.x) + 1"


def test_a_helper_that_cooperates_makes_the_kernel_no_element_map():
    from kerntune.agents.kernel_tree import classify
    a = classify(AROUND.replace("const float4 *packs = reinterpret_cast<const float4 *>(x);", "")
                 .replace(" + packs[0].x", "").replace("float *where = &keep[i];", "")
                 .replace(" + where[0]", ""))
    assert a.element == "i" and a.guard.form == "return"
    assert a.kind == "neither" and a.reasons == ("threads cooperate (atomics)",)


CARRIED = r'''
__global__ void k(const float *x, float *y, int *at, int C) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    float m = -1e30f, s = 0.0f, best = -1e30f, lo = 1e30f, run = 0.0f;
    int where = 0, n = 0;
    for (int i = 0; i < C; i++) {
        float v = x[row * C + i];
        float prev = m;
        m = fmaxf(m, v);
        s = s * expf(prev - m) + expf(v - m);
        if (v > best) { best = v; where = i; }
        lo = v < lo ? v : lo;
        run += v;
        y[row * C + i] = run;
        n++;
    }
    at[row] = where + n;
}
'''


def test_what_a_loop_carries_is_read_once_the_online_pair_and_scans_included():
    m = build(CARRIED, "k")
    got = {a.var: a for a in m.accumulators}
    assert [(a.var, a.op) for a in m.accumulators] == [
        ("m", "online"), ("best", "max"), ("where", "other"), ("lo", "min"), ("run", "sum"), ("n", "sum")]
    assert (got["m"].partner, got["m"].exp, got["m"].ctype) == ("s", "expf", "float")
    # a sum read while it accumulates is a scan: where it is read is told
    (read,) = got["run"].reads
    assert CARRIED.encode()[read.start:read.end] == b"run" and not got["best"].reads
    assert m.scalars >= {"m", "s", "where", "n"} and m.types["where"] == "int"
