"""Building cubins: NVRTC (NVIDIA's runtime compiler, through cuda-python) first, nvcc after.

Neither needs pycuda or a GPU, so the compile pool and the CPU tests run this anywhere a compiler
is installed. NVRTC compiles in the calling process in about a quarter of nvcc's time (no host
compiler, no driver script, no temporary files); nvcc builds what NVRTC cannot: a source with host
code or host headers, or options NVRTC does not know. Either way the cubin is the same kind of
file, its kernels are found by their symbols (C++ names included, `cuda_symbols`), and the
register, spill and shared-memory figures come from ptxas's own report, which both print.

Cubins are cached on disk, keyed by source, defines, options, architecture and the compiler's
version: a cubin never outlives the toolkit that built it.

`KERNTUNE_COMPILER` chooses: `auto` (the default: NVRTC where it works, nvcc otherwise), `nvrtc`
(NVRTC only) or `nvcc` (nvcc only).
"""

from __future__ import annotations

import atexit
import functools
import glob
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from . import CompileError, compile_message
from .cuda_symbols import resolve_entry

NVCC_FLAGS = ("-O3", "-lineinfo", "-Xptxas=-v")
NVCC_TIMEOUT_S = 300
# NVRTC's equivalents of NVCC_FLAGS (device code is optimised at -O3 by default in both; nvcc's
# -O3 is for host code, which NVRTC does not compile).
NVRTC_FLAGS = ("-lineinfo", "--ptxas-options=-v")
COMPILERS = ("auto", "nvrtc", "nvcc")
# What a block may use without opting in, where the device does not say.
DEFAULT_SHARED_LIMIT = 48 * 1024

_DEFINE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def find_cuda_tool(name: str, env: str | None = None, also: Sequence[str] = ()) -> str | None:
    """A CUDA toolkit program (nvcc, ncu, compute-sanitizer): the path in $`env` when that is set
    (None if it is not executable), else `name` on PATH, else under CUDA_HOME / CUDA_PATH / the
    usual install place, else the first executable match of the `also` globs (newest first)."""
    if env and os.environ.get(env):
        path = os.environ[env]
        return path if os.access(path, os.X_OK) else None
    found = shutil.which(name)
    if found:
        return found
    roots = (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda")
    candidates = [os.path.join(root, "bin", name) for root in roots if root]
    for pattern in also:
        candidates += sorted(glob.glob(pattern), reverse=True)
    return next((c for c in candidates if os.access(c, os.X_OK)), None)


def run_cuda_tool(cmd: Sequence[str], name: str, timeout: float, error: type[Exception]) -> tuple[str, int]:
    """Run a CUDA tool (ncu, compute-sanitizer) on a child program: (its output and the program's,
    stdout then stderr; the exit code). `error`, one line, when it cannot start or does not
    finish within `timeout` seconds. Python's warnings are kept out of the child's output."""
    return finish_cuda_tool(start_cuda_tool(cmd, name, error), name, timeout, error)


# the tools started and not yet ended: each leads a process group of its own, which no signal to
# the run's group reaches, so the run ends them itself when it ends (`end_cuda_tools`)
_LIVE: set[subprocess.Popen] = set()
_LIVE_LOCK = threading.Lock()


def start_cuda_tool(cmd: Sequence[str], name: str, error: type[Exception]) -> subprocess.Popen:
    """Start a CUDA tool on a child program without waiting for it (`finish_cuda_tool` does);
    its standard input is a pipe the caller may write to. The tool leads a process group of its
    own, so that ending it ends the program it runs too (`stop_cuda_tool`)."""
    try:
        proc = subprocess.Popen(list(cmd), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"}, start_new_session=True)
    except OSError as e:
        raise error(f"cannot start {name}: {e}") from None
    with _LIVE_LOCK:
        _LIVE.add(proc)
    return proc


def end_cuda_tools() -> None:
    """End every tool still running, and what it runs (at exit, and when the run is cut)."""
    with _LIVE_LOCK:
        live = list(_LIVE)
        _LIVE.clear()
    for proc in live:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


atexit.register(end_cuda_tools)


def finish_cuda_tool(proc: subprocess.Popen, name: str, timeout: float, error: type[Exception],
                     stdin: str | None = None) -> tuple[str, int]:
    """Give a started tool `stdin` (then end of input) and wait for it: (stdout then stderr, exit
    code); `error` when it does not finish within `timeout` seconds (it is killed)."""
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_cuda_tool(proc)
        raise error(f"{name} did not finish within {timeout:.0f} s") from None
    except BaseException:  # the run is cut (a signal, Ctrl-C) while the tool runs: it ends with it
        stop_cuda_tool(proc)
        raise
    except OSError as e:  # the child's input closed early: it ended before reading it
        out, err = stop_cuda_tool(proc)
        if proc.returncode is None:
            raise error(f"{name} stopped: {e}") from None
    with _LIVE_LOCK:
        _LIVE.discard(proc)
    return out + "\n" + err, proc.returncode


def follow_cuda_tool(proc: subprocess.Popen, stdin: str, idle: float, progress: re.Pattern[str]) -> tuple[str, int, bool]:
    """Give a started tool `stdin` (then end of input) and read its output as it comes: the
    program it runs has `idle` seconds after each line matching `progress` (and after the
    start) to print the next one or end, else the tool is ended with it. (stdout then stderr,
    the exit code, whether it was ended so); what was read before the end is kept."""
    out: list[str] = []
    err: list[str] = []
    heard = [time.monotonic()]

    def pump(stream: Any, sink: list[str], watch: bool) -> None:
        try:
            for line in stream:
                sink.append(line)
                if watch and progress.search(line):
                    heard[0] = time.monotonic()
        except (OSError, ValueError):  # the pipe closed under it
            pass

    readers = [threading.Thread(target=pump, args=(proc.stdout, out, True), daemon=True),
               threading.Thread(target=pump, args=(proc.stderr, err, False), daemon=True)]
    for r in readers:
        r.start()
    ended = False
    try:
        try:
            proc.stdin.write(stdin)
            proc.stdin.close()
        except OSError:  # the program ended before it read its input: its output says why
            pass
        while True:
            try:
                proc.wait(0.2)
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() - heard[0] > idle:
                    ended = True
                    _kill_group(proc)
    except BaseException:  # the run is cut (a signal, Ctrl-C) while the tool runs: it ends with it
        _kill_group(proc)
        raise
    for r in readers:
        r.join(10)  # something left the group and holds the pipe: what it printed so far
    with _LIVE_LOCK:
        _LIVE.discard(proc)
    return "".join(out) + "\n" + "".join(err), proc.returncode if proc.returncode is not None else -9, ended


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def stop_cuda_tool(proc: subprocess.Popen, grace: float = 0.0, stdin: str | None = None) -> tuple[str, str]:
    """End a started tool and everything in its process group: the program it runs, and whatever
    that started. Killing the tool alone is not enough: compute-sanitizer's and ncu's target holds
    the output pipes and may wait for the tool it lost, so reading to their end would never return.
    `stdin` first (then end of input) and `grace` seconds to finish on its own. (stdout, stderr),
    what could be read."""
    if proc.poll() is None and (grace > 0 or stdin is not None):
        try:
            if stdin is not None and proc.stdin is not None and not proc.stdin.closed:
                proc.stdin.write(stdin)
            if proc.stdin is not None and not proc.stdin.closed:
                proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group has ended
    if proc.poll() is None:
        proc.kill()
    with _LIVE_LOCK:
        _LIVE.discard(proc)
    try:
        return proc.communicate(timeout=10)
    except (subprocess.TimeoutExpired, ValueError, OSError):  # something left the group and holds a pipe
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        proc.wait()
        return "", ""


def find_nvcc() -> str | None:
    """nvcc on PATH, else under CUDA_HOME / CUDA_PATH, else the usual install place."""
    return find_cuda_tool("nvcc")


@functools.lru_cache(maxsize=4)
def nvcc_version(nvcc: str) -> str:
    """`nvcc --version` output; part of the cache key, so a new toolkit never reuses old cubins."""
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise CompileError(f"cannot run {nvcc} --version: {e}") from None
    return out.stdout.strip()


def cache_dir() -> Path:
    """Where cubins are kept: $KERNTUNE_CACHE_DIR/cubin, by default ~/.cache/kerntune/cubin."""
    root = os.environ.get("KERNTUNE_CACHE_DIR") or os.path.join(Path.home(), ".cache", "kerntune")
    return Path(root) / "cubin"


def normalize_arch(arch: str) -> str:
    """'9.0', '90', 'sm_90' and 'sm_90a' all name a real architecture for -arch."""
    a = arch.strip().lower()
    m = re.fullmatch(r"(\d+)\.(\d+)([af]?)", a)
    if m:
        return f"sm_{m.group(1)}{m.group(2)}{m.group(3)}"
    if re.fullmatch(r"\d+[af]?", a):
        return f"sm_{a}"
    if re.fullmatch(r"sm_\d+[af]?", a):
        return a
    raise CompileError(f"not a CUDA architecture: {arch!r} (expected e.g. sm_90 or 9.0)")


def device_arch(compute_capability: str) -> str:
    """The architecture a device's kernels are built for: its own, with the architecture-specific
    features where one has them that kernels use (9.0 builds as sm_90a: Hopper's warpgroup
    tensor-core instructions, `wgmma`, exist only there; such a cubin runs on 9.0 devices alone,
    as every cubin built for the device does). "sm_90" when the capability is unknown."""
    cc = compute_capability.replace(".", "").strip()
    if not re.fullmatch(r"\d+", cc):
        return "sm_90"
    return f"sm_{cc}" + ("a" if cc == "90" else "")


def cache_key(source: str, defines: Mapping[str, str], options: Sequence[str], arch: str,
              version: str) -> str:
    """sha256 over everything that changes the cubin."""
    blob = json.dumps(
        {
            "source": source,
            "defines": sorted((str(k), str(v)) for k, v in defines.items()),
            "options": [str(o) for o in options],
            "arch": arch,
            "nvcc": version,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


# NVRTC -----------------------------------------------------------------------------------------

def _nvrtc_module() -> Any:
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        try:
            from cuda import nvrtc  # cuda-python before 12.6 named the module so
        except ImportError:
            return None
    return nvrtc


@functools.lru_cache(maxsize=1)
def nvrtc_version() -> str:
    """'nvrtc 13.0' where cuda-python and the NVRTC library both load, else ''."""
    nvrtc = _nvrtc_module()
    if nvrtc is None:
        return ""
    try:
        err, major, minor = nvrtc.nvrtcVersion()
    except Exception:  # the bindings load but libnvrtc does not (RuntimeError, OSError, ...)
        return ""
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        return ""
    return f"nvrtc {major}.{minor}"


def compiler_choice() -> str:
    choice = os.environ.get("KERNTUNE_COMPILER", "auto").strip().lower() or "auto"
    if choice not in COMPILERS:
        raise CompileError(f"KERNTUNE_COMPILER={choice!r}: expected one of {', '.join(COMPILERS)}")
    return choice


def compiler_summary() -> str:
    """What builds cubins here, in words, for the run's notes."""
    choice = compiler_choice()
    nvrtc, nvcc = nvrtc_version(), find_nvcc()
    if choice == "nvcc" or not nvrtc:
        why = "" if choice == "nvcc" else " (NVRTC not available: install cuda-python with the `cuda` extra)"
        return f"nvcc{why}" if nvcc else "no CUDA compiler found"
    if choice == "nvrtc" or not nvcc:
        return nvrtc
    return f"{nvrtc}, nvcc for what NVRTC cannot build"


@functools.lru_cache(maxsize=1)
def toolkit_include() -> tuple[str, ...]:
    """Folders holding the toolkit's device headers (cuda_fp16.h, cuda_bf16.h, ...), which NVRTC
    needs on its include path and nvcc finds by itself."""
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    nvcc = find_nvcc()
    if nvcc:
        roots.append(str(Path(os.path.realpath(nvcc)).parent.parent))
    roots.append("/usr/local/cuda")
    try:  # the header wheels pip installs beside NVRTC's (nvidia/cu13/include, nvidia/cuda_runtime/include)
        import nvidia  # type: ignore[import-not-found]
        for base in getattr(nvidia, "__path__", []):
            for sub in ("cu13", "cu12", "cuda_runtime", "cuda_nvrtc"):
                roots.append(os.path.join(base, sub))
    except ImportError:
        pass
    for root in roots:
        inc = os.path.join(root, "include") if root else ""
        if inc and os.path.isfile(os.path.join(inc, "cuda_fp16.h")):
            # CUDA 13 keeps libcu++ (cuda/std/..., which cooperative_groups needs), CUB and Thrust
            # under include/cccl, which nvcc adds by itself
            cccl = os.path.join(inc, "cccl")
            return (inc, cccl) if os.path.isdir(cccl) else (inc,)
    return ()


# nvcc options NVRTC takes as they are, by prefix; anything else sends the build to nvcc.
_NVRTC_SAME = ("-I", "--include-path", "-D", "--define-macro", "-U", "--undefine-macro",
               "--use_fast_math", "-use_fast_math", "--maxrregcount", "-maxrregcount", "-std=", "--std",
               "-lineinfo", "--generate-line-info", "--ftz", "-ftz", "--prec-div", "-prec-div",
               "--prec-sqrt", "-prec-sqrt", "--fmad", "-fmad", "--extra-device-vectorization",
               "--restrict", "-restrict", "--device-debug", "-G", "--relocatable-device-code=false",
               "-rdc=false", "--dopt", "-dopt", "--expt-relaxed-constexpr", "--expt-extended-lambda",
               "-extended-lambda", "--extended-lambda", "-default-device", "--Wno-deprecated-declarations")
_NVRTC_DROP = ("-O3", "-O2", "-O1", "-O0", "-Xptxas=-v", "--ptxas-options=-v", "-Xptxas=--verbose")


def nvrtc_options(options: Sequence[str]) -> list[str] | None:
    """`options` as NVRTC spells them, or None when one of them is nvcc's alone."""
    out, it = [], iter(str(o) for o in options)
    for o in it:
        if o in _NVRTC_DROP:
            continue
        if o in ("-Xptxas", "--ptxas-options"):
            nxt = next(it, "")
            if nxt not in ("-v", "--verbose"):
                out.append(f"--ptxas-options={nxt}")
            continue
        if o.startswith(("-Xptxas=", "--ptxas-options=")):
            out.append("--ptxas-options=" + o.split("=", 1)[1])
            continue
        if o.startswith(_NVRTC_SAME):
            out.append(o)
            continue
        return None
    return out


# What nvcc's implicit host headers give every CUDA file and kernels use without an include
# (`-INFINITY` as a max-reduction's start): NVRTC gets it from this header, included first (CUDA's
# own math_constants.h spells infinity the same way; a constant expression that needs more goes to nvcc).
NVRTC_PRELUDE_NAME = "kerntune_nvrtc_prelude.h"
NVRTC_PRELUDE = """
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif
#ifndef HUGE_VALF
#define HUGE_VALF __int_as_float(0x7f800000)
#endif
#ifndef HUGE_VAL
#define HUGE_VAL __longlong_as_double(0x7ff0000000000000ULL)
#endif
#ifndef M_PI
#define M_E 2.7182818284590452354
#define M_LOG2E 1.4426950408889634074
#define M_LOG10E 0.43429448190325182765
#define M_LN2 0.69314718055994530942
#define M_LN10 2.30258509299404568402
#define M_PI 3.14159265358979323846
#define M_PI_2 1.57079632679489661923
#define M_PI_4 0.78539816339744830962
#define M_1_PI 0.31830988618379067154
#define M_2_PI 0.63661977236758134308
#define M_2_SQRTPI 1.12837916709551257390
#define M_SQRT2 1.41421356237309504880
#define M_SQRT1_2 0.70710678118654752440
#endif
"""
# <cfloat> / <float.h>, which NVRTC does not ship: the IEEE figures, as the C library defines them.
FLOAT_H = """
#pragma once
#define FLT_RADIX 2
#define FLT_MANT_DIG 24
#define DBL_MANT_DIG 53
#define FLT_DIG 6
#define DBL_DIG 15
#define FLT_EPSILON 1.19209290e-7F
#define DBL_EPSILON 2.2204460492503131e-16
#define FLT_MIN 1.17549435e-38F
#define DBL_MIN 2.2250738585072014e-308
#define FLT_MAX 3.40282347e+38F
#define DBL_MAX 1.7976931348623157e+308
#define FLT_MIN_EXP (-125)
#define DBL_MIN_EXP (-1021)
#define FLT_MAX_EXP 128
#define DBL_MAX_EXP 1024
#define FLT_TRUE_MIN 1.40129846e-45F
#define DBL_TRUE_MIN 4.9406564584124654e-324
"""
NVRTC_HEADERS = {NVRTC_PRELUDE_NAME: NVRTC_PRELUDE, "cfloat": FLOAT_H, "float.h": FLOAT_H}


class _NvrtcFailed(Exception):
    """NVRTC refused the program; `log` is its log."""

    def __init__(self, log: str):
        super().__init__(log)
        self.log = log


def _run_nvrtc(source: str, defines: Mapping[str, str], options: Sequence[str], arch: str) -> tuple[bytes, str]:
    nvrtc = _nvrtc_module()
    ok = nvrtc.nvrtcResult.NVRTC_SUCCESS
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"kernel.cu", len(NVRTC_HEADERS),
                                         [v.encode() for v in NVRTC_HEADERS.values()],
                                         [k.encode() for k in NVRTC_HEADERS])
    if err != ok:
        raise _NvrtcFailed(f"nvrtcCreateProgram: {err}")
    try:
        args = [f"-arch={arch}", *NVRTC_FLAGS, *(f"-D{k}={v}" for k, v in defines.items()), *options,
                *(f"-I{inc}" for inc in toolkit_include()), f"--pre-include={NVRTC_PRELUDE_NAME}"]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(args), [a.encode() for a in args])
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        raw = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, raw)
        log = raw.rstrip(b"\x00").decode(errors="replace")
        if err != ok:
            raise _NvrtcFailed(log or str(err))
        _, size = nvrtc.nvrtcGetCUBINSize(prog)
        cubin = b" " * size
        (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
        if err != ok or size == 0:
            raise _NvrtcFailed(f"nvrtcGetCUBIN: {err}")
        return cubin, log
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def warm_compiler(arch: str) -> str:
    """Build one empty kernel with NVRTC, uncached: a process's first build pays for loading the
    library and reading the toolkit's headers (0.3-0.5 s on the GPU machine), and a compile
    process that did so at its start builds its first configuration at once. Returns what builds
    here (`compiler_summary`)."""
    if compiler_choice() != "nvcc" and nvrtc_version():
        try:
            _run_nvrtc('extern "C" __global__ void kerntune_warm() {}\n', {}, (), normalize_arch(arch))
        except Exception:  # whatever fails here fails the first configuration too, and says so there
            pass
    return compiler_summary()


# Sources (with their options) NVRTC could not build but nvcc could: later configurations of the
# same template go to nvcc at once instead of failing NVRTC first every time.
_NVCC_ONLY: set[str] = set()
_NVCC_ONLY_LOCK = threading.Lock()


# the one entry point ---------------------------------------------------------------------------

# a compiler's words for an architecture it does not know (nvcc's, NVRTC's)
_UNKNOWN_ARCH = re.compile(r"Unsupported gpu architecture|invalid value for --gpu-architecture", re.IGNORECASE)


def compile_cubin(source: str, entry: str, defines: Mapping[str, str],
                  options: Sequence[str] = (), arch: str = "sm_90") -> tuple[bytes, dict, bool]:
    """Build a cubin with NVRTC or nvcc (see the module's notes), or take it from the cache.

    Returns (cubin bytes, ptxas figures for `entry`, whether it came from the cache). The figures
    are registers, spill_stores, spill_loads, stack_frame, smem (bytes), barriers and cmem where
    ptxas printed them. Raises CompileError with the compiler's first error lines. A compiler too
    old for an architecture-specific target (`sm_90a`, CUDA 12 on) builds for the plain one: the
    kernels that need the specific features then stop at their own `#error`, the others build."""
    arch = normalize_arch(arch)
    try:
        return _compile_cubin(source, entry, defines, options, arch)
    except CompileError as e:
        if arch[-1] in "af" and _UNKNOWN_ARCH.search(str(e)):
            return _compile_cubin(source, entry, defines, options, arch[:-1])
        raise


def _compile_cubin(source: str, entry: str, defines: Mapping[str, str], options: Sequence[str],
                   arch: str) -> tuple[bytes, dict, bool]:
    """compile_cubin for one architecture, as normalize_arch names it."""
    for name in defines:
        # one -DNAME=VALUE argument each, but a name like "-o..." must not reach a compiler at all
        if not _DEFINE_NAME.match(str(name)):
            raise CompileError(f"not a preprocessor name: {name!r}")
    choice = compiler_choice()
    nvcc = find_nvcc() if choice != "nvrtc" else None
    translated = nvrtc_options(options) if choice != "nvcc" and nvrtc_version() else None
    family = hashlib.sha256(json.dumps([source, list(map(str, options)), arch]).encode()).hexdigest()
    use_nvrtc = translated is not None and (family not in _NVCC_ONLY or nvcc is None)
    if choice == "nvrtc" and translated is None:
        raise CompileError("KERNTUNE_COMPILER=nvrtc, but " + (
            "NVRTC is not available (install cuda-python)" if not nvrtc_version()
            else "these options are nvcc's alone: " + " ".join(map(str, options))))
    if not use_nvrtc and nvcc is None:
        raise CompileError("nvcc not found: put the CUDA toolkit's bin/ on PATH or set CUDA_HOME"
                           + ("" if nvrtc_version() else ", or install cuda-python for NVRTC"))

    if use_nvrtc:
        key = cache_key(source, defines, options, arch, nvrtc_version())
        hit = _cached(key, entry)
        if hit is not None:
            return hit
        try:
            cubin, log = _run_nvrtc(source, defines, translated, arch)
        except _NvrtcFailed as failed:
            if nvcc is None:
                raise CompileError(compile_message(first_errors(failed.log, "nvrtc failed"), failed.log)) from None
            cubin, log = _run_nvcc(nvcc, source, defines, options, arch)  # raises nvcc's own message
            with _NVCC_ONLY_LOCK:
                _NVCC_ONLY.add(family)
            key = cache_key(source, defines, options, arch, nvcc_version(nvcc))
        return _keep(key, cubin, parse_ptxas(log), entry)

    key = cache_key(source, defines, options, arch, nvcc_version(nvcc))
    hit = _cached(key, entry)
    if hit is not None:
        return hit
    cubin, log = _run_nvcc(nvcc, source, defines, options, arch)
    return _keep(key, cubin, parse_ptxas(log), entry)


def _cached(key: str, entry: str) -> tuple[bytes, dict, bool] | None:
    where = cache_dir()
    try:
        functions = json.loads((where / f"{key}.json").read_text())
        cubin = (where / f"{key}.cubin").read_bytes()
    except (OSError, ValueError):
        return None
    return cubin, _entry_info(functions, cubin, entry), True


def _keep(key: str, cubin: bytes, functions: dict, entry: str) -> tuple[bytes, dict, bool]:
    info = _entry_info(functions, cubin, entry)  # before storing: a missing kernel is an error
    _store(cache_dir(), key, cubin, functions)
    return cubin, info, False


def _run_nvcc(nvcc: str, source: str, defines: Mapping[str, str], options: Sequence[str],
              arch: str) -> tuple[bytes, str]:
    with tempfile.TemporaryDirectory(prefix="kerntune-nvcc-") as tmp:
        src = os.path.join(tmp, "kernel.cu")
        out = os.path.join(tmp, "kernel.cubin")
        Path(src).write_text(source, encoding="utf-8")
        cmd = [nvcc, "-cubin", f"-arch={arch}", *NVCC_FLAGS,
               *(f"-D{k}={v}" for k, v in defines.items()), *map(str, options), "-o", out, src]
        try:
            proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True,
                                  timeout=NVCC_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise CompileError(f"nvcc took longer than {NVCC_TIMEOUT_S} s") from None
        except OSError as e:
            raise CompileError(f"cannot run nvcc: {e}") from None
        # The temporary path means nothing to the user; the file is their kernel.
        log = (proc.stdout + proc.stderr).replace(src, "kernel.cu").replace(tmp + os.sep, "")
        if proc.returncode != 0 or not os.path.exists(out):
            raise CompileError(compile_message(first_errors(log), log))
        return Path(out).read_bytes(), log


def _store(where: Path, key: str, cubin: bytes, functions: dict) -> None:
    # Written under a temporary name and renamed, because compile workers share the cache: a
    # reader sees a whole file or none. A cache that cannot be written only costs a recompile.
    try:
        where.mkdir(parents=True, exist_ok=True)
        for name, data in ((f"{key}.cubin", cubin), (f"{key}.json", json.dumps(functions).encode())):
            fd, tmp = tempfile.mkstemp(dir=where, prefix=".tmp-")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, where / name)
    except OSError:
        pass


def _entry_info(functions: Mapping[str, dict], cubin: bytes, entry: str) -> dict:
    """ptxas figures of the kernel `entry` names (C++ or extern "C"), found in the cubin's symbols."""
    symbol = resolve_entry(cubin, entry).symbol
    return dict(functions.get(symbol, {}))


_FUNC_RE = re.compile(r"(?:Compiling entry function|Function properties for) '?([^'\s]+)'?")
_PROPS_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED_RE = re.compile(r"Used (\d+) registers")
_FIELDS = {
    "smem": re.compile(r"(\d+) bytes smem"),
    "cmem": re.compile(r"(\d+) bytes cmem\[0\]"),
    "barriers": re.compile(r"used (\d+) barriers"),
}


def parse_ptxas(log: str) -> dict[str, dict]:
    """ptxas -v figures for every function it reports, by name.

    Entry functions carry "entry": True, registers, spill_stores, spill_loads, stack_frame and,
    where printed, smem, cmem and barriers (all byte counts except registers and barriers).
    """
    functions: dict[str, dict] = {}
    current: dict | None = None
    for line in log.splitlines():
        m = _FUNC_RE.search(line)
        if m:
            current = functions.setdefault(m.group(1), {})
            if "Compiling entry function" in line:
                current["entry"] = True
            continue
        if current is None:
            continue
        m = _PROPS_RE.search(line)
        if m:
            current["stack_frame"], current["spill_stores"], current["spill_loads"] = map(int, m.groups())
            continue
        m = _USED_RE.search(line)
        if m:
            current["registers"] = int(m.group(1))
            current["smem"] = 0  # ptxas leaves out a zero smem
            for name, rx in _FIELDS.items():
                fm = rx.search(line)
                if fm:
                    current[name] = int(fm.group(1))
    return functions


def first_errors(log: str, fallback: str = "nvcc failed", limit: int = 6) -> str:
    """The compiler's first error lines, joined on one line, at most about 800 characters."""
    lines = [l.rstrip() for l in log.splitlines() if l.strip()]
    errors = [l for l in lines if re.search(r"\berror\b", l, re.IGNORECASE)
              and not re.match(r"\d+ (catastrophic )?errors? detected", l.strip())]
    chosen = errors[:limit] or lines[-limit:]
    return " | ".join(chosen)[:800] or fallback
