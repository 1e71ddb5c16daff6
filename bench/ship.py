"""Does an exported header reproduce the measured program? (needs nvcc and a CUDA GPU)

    python bench/ship.py SESSION|FOLDER [--repeats 200] [--keep DIR]

`kerntune export --format header` of a CUDA session (or of a served-size run's folder: its
dispatch set) is compiled with nvcc into a small program that includes it, draws the
template's inputs at each size shipped, launches through the header's `launch(sizes, ...)`
(its dispatch and its geometry), writes the outputs, and times `--repeats` launches with CUDA
events, the L2 cache flushed before each as kerntune does. The outputs are compared with the
template's numpy reference at kerntune's tolerance, and the median with the session's recorded
time: the table says whether it lies within the 95% interval of the recorded launches.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from kerntune import templates
from kerntune.engine.compare import Expected, compare
from kerntune.engine.export import export_header, shipped_of, shipped_of_folder
from kerntune.engine.inputs import arg_shape, make_inputs
from kerntune.engine.result import config_key
from kerntune.engine.retime import median_interval
from kerntune.engine.session import load_session
from kerntune.engine.template import load_template, np_dtype

C_TYPES = {"float16": "__half", "bfloat16": "__nv_bfloat16", "float32": "float", "float64": "double",
           "int8": "signed char", "uint8": "unsigned char", "int16": "short", "uint16": "unsigned short",
           "int32": "int", "uint32": "unsigned int", "int64": "long long", "uint64": "unsigned long long"}

MAIN = r"""
#include "shipped.h"
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>

static void *read_file(const char *path, size_t bytes) {
    void *host = std::malloc(bytes);
    FILE *f = std::fopen(path, "rb");
    if (!f || std::fread(host, 1, bytes, f) != bytes) { std::fprintf(stderr, "cannot read %s\n", path); std::exit(2); }
    std::fclose(f);
    return host;
}

#define CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); std::exit(1); } } while (0)

int main() {
    NS::Sizes s{SIZES};
    std::printf("config %d\n", NS::dispatch(s));
BUFFERS
    // the correctness launch, on pristine inputs
    CHECK(NS::launch(s, 0, ARGS));
    CHECK(cudaDeviceSynchronize());
WRITE
    // the timed launches: every cache flushed before each, as kerntune times
    int l2 = 0;
    CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    size_t flush_bytes = std::max((size_t)2 * l2, (size_t)4 << 20);
    void *flush = nullptr;
    CHECK(cudaMalloc(&flush, flush_bytes));
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    std::vector<float> times;
    for (int i = 0; i < REPEATS + 3; ++i) {
RESTORE
        CHECK(cudaMemsetAsync(flush, i & 255, flush_bytes));
        CHECK(cudaEventRecord(a));
        CHECK(NS::launch(s, 0, ARGS));
        CHECK(cudaEventRecord(b));
        CHECK(cudaEventSynchronize(b));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, a, b));
        if (i >= 3) times.push_back(ms * 1000.0f);
    }
    std::sort(times.begin(), times.end());
    std::printf("median_us %.4f\n", times[times.size() / 2]);
    return 0;
}
"""


def program(template, problem, sizes_order, inputs, folder: Path, ns: str, repeats: int) -> str:
    """main.cu for one size: buffers from files, the header's launch, outputs to files, timing."""
    buffers, args, write, restore = [], [], [], []
    for a in template.arguments:
        if a.role == "scalar":
            args.append(f"({C_TYPES[a.dtype]}){int(inputs.scalars[a.name])}")
            continue
        shape = arg_shape(a, problem)
        nbytes = int(np.prod(shape)) * np.dtype(np_dtype(a.dtype)).itemsize
        ctype = C_TYPES[a.dtype]
        buffers.append(f"    {ctype} *{a.name} = nullptr;\n    CHECK(cudaMalloc(&{a.name}, {nbytes}));")
        if a.name in inputs.host:
            path = folder / f"{a.name}.in"
            inputs.host[a.name].tofile(path)
            buffers.append(f"    void *{a.name}_host = read_file(\"{path}\", {nbytes});\n"
                           f"    CHECK(cudaMemcpy({a.name}, {a.name}_host, {nbytes}, cudaMemcpyHostToDevice));")
            if a.role == "inout":
                restore.append(f"        CHECK(cudaMemcpyAsync({a.name}, {a.name}_host, {nbytes}, "
                               "cudaMemcpyHostToDevice));")
        if a.role in ("output", "inout"):
            write.append(f"    {{ void *h = std::malloc({nbytes}); CHECK(cudaMemcpy(h, {a.name}, {nbytes}, "
                         f"cudaMemcpyDeviceToHost)); FILE *f = std::fopen(\"{folder / (a.name + '.out')}\", \"wb\"); "
                         f"std::fwrite(h, 1, {nbytes}, f); std::fclose(f); std::free(h); }}")
        args.append(a.name)
    text = MAIN.replace("NS::", f"{ns}::").replace("SIZES", ", ".join(str(problem.values[n]) for n in sizes_order))
    return (text.replace("BUFFERS", "\n".join(buffers)).replace("ARGS", ", ".join(args))
            .replace("WRITE", "\n".join(write)).replace("RESTORE", "\n".join(restore))
            .replace("REPEATS", str(repeats)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", type=Path, help="a CUDA session, or a served-size run's folder")
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--keep", type=Path, help="keep the header, the program and its files here")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.source.is_dir():
        shipped, sessions = shipped_of_folder(args.source)
        session = next(iter(sessions.values()))
    else:
        session = load_session(args.source)
        shipped, sessions = [shipped_of(session)], {shipped_of(session).size: session}
    name = str(session.template.get("name"))
    path = Path(str(session.template.get("path", "")))
    template = load_template(path if path.is_file() else templates.path(name))
    header = export_header(session, shipped)
    work = args.keep or Path(tempfile.mkdtemp(prefix="kerntune-ship-"))
    work.mkdir(parents=True, exist_ok=True)
    (work / "shipped.h").write_text(header)
    ns = "kerntune_" + "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    cc = str(session.device.get("compute_capability", "")).replace(".", "")
    rows = []
    for s in shipped:
        problem = template.problem(None, dict(s.problem))
        folder = work / "".join(c if c.isalnum() else "_" for c in s.size)
        folder.mkdir(exist_ok=True)
        inputs = make_inputs(template, problem, args.seed)
        (folder / "main.cu").write_text(program(template, problem, list(s.problem), inputs, folder, ns, args.repeats))
        build = subprocess.run(["nvcc", "-O3", *([f"-arch=sm_{cc}"] if cc.isdigit() else []),
                                *[o for o in template.compile_options.get("cuda", ()) if not o.startswith("-D")],
                                f"-I{work}", "-o", str(folder / "main"), str(folder / "main.cu")],
                               capture_output=True, text=True)
        if build.returncode:
            print(build.stderr, file=sys.stderr)
            return 1
        run = subprocess.run([str(folder / "main")], capture_output=True, text=True, timeout=600)
        if run.returncode:
            print(run.stdout + run.stderr, file=sys.stderr)
            return 1
        said = dict(line.split(" ", 1) for line in run.stdout.splitlines() if " " in line)
        expected = template.load_reference()({**{k: v.copy() for k, v in inputs.host.items()}, **inputs.scalars},
                                             dict(problem.values))
        verdicts = []
        for a in (a for a in template.arguments if a.role in ("output", "inout")):
            out = np.fromfile(folder / f"{a.name}.out", dtype=np_dtype(a.dtype)).reshape(arg_shape(a, problem))
            ref = np.asarray(expected[a.name]).astype(np_dtype(a.dtype)).reshape(arg_shape(a, problem))
            worst, why = compare(a.name, out, Expected(ref, a.dtype, a))
            verdicts.append("ok" if not why else why)
        recorded = next(r for r in sessions[s.size].results() if config_key(r.config) == config_key(s.config))
        low, _, high = median_interval(recorded.times_us)
        median = float(said.get("median_us", "nan"))
        rows.append((s.size, said.get("config", "?"), "; ".join(verdicts), median, recorded.median_us, low, high))
    print(f"{name} on {session.device.get('name')}: the exported header (in {work}) compiled with nvcc and run")
    print("| size | config | outputs | header us | recorded us [95%] | within |")
    print("|---|---|---|---|---|---|")
    ok = True
    for size, config, verdict, median, rec, low, high in rows:
        within = low <= median <= high
        ok &= verdict == "ok"
        print(f"| {size} | {config} | {verdict} | {median:.2f} | {rec:.2f} [{low:.2f}, {high:.2f}] | "
              f"{'yes' if within else f'no ({median / rec:.3f}x)'} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
