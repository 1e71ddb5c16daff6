"""Kernel Tuner cache files (JSON, schema 1.0.0): import one as a session, export a session as one.

Spaces recorded with Kernel Tuner can then be replayed and simulated here, and ours there.
Kernel Tuner keys each configuration by its values joined with commas, in `tune_params_keys`
order, and stores times in milliseconds; a failed configuration's `time` is a string naming why.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .events import ConfigEvaluated, RunFinished, RunStarted, SpaceBuilt
from .result import Result, ranked
from .session import Session, SessionWriter, new_header

SCHEMA_VERSION = "1.0.0"
FAILURES = {
    "CompilationFailedConfig": "compile_error",
    "RuntimeFailedConfig": "launch_error",
    "InvalidConfig": "pruned",
}
STATUS_TO_FAILURE = {
    "compile_error": "CompilationFailedConfig",
    "pruned": "InvalidConfig",
}


class CacheFormatError(ValueError):
    """A file that is not a Kernel Tuner cache we can read; the message is one line."""


def _need(cond: bool, path: Path, what: str) -> None:
    if not cond:
        raise CacheFormatError(f"{path}: not a Kernel Tuner cache file: {what}")


def import_cache(path: Path, out: Path) -> Path:
    """Write the cache file at `path` as a kerntune session at `out`."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CacheFormatError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CacheFormatError(f"{path}: not valid JSON: {e}") from None
    _need(isinstance(data, dict), path, "expected a JSON object")
    keys = data.get("tune_params_keys")
    _need(isinstance(keys, list) and all(isinstance(k, str) for k in keys), path, "tune_params_keys must be a list of names")
    params = data.get("tune_params", {})
    _need(isinstance(params, dict), path, "tune_params must be an object")
    cache = data.get("cache")
    _need(isinstance(cache, dict), path, "cache must be an object")
    problem = data.get("problem_size", [])
    _need(isinstance(problem, list) and all(isinstance(x, int) for x in problem), path, "problem_size must be integers")
    kernel = str(data.get("kernel_name", "imported"))
    device = str(data.get("device_name", "unknown device"))
    results = []
    for line_key, entry in cache.items():
        _need(isinstance(entry, dict), path, f"cache entry {line_key!r} is not an object")
        missing = [k for k in keys if k not in entry]
        _need(not missing, path, f"cache entry {line_key!r} lacks {', '.join(missing)}")
        config = {k: entry[k] for k in keys}
        _need(all(isinstance(v, (int, float, bool)) for v in config.values()), path,
              f"cache entry {line_key!r} has non-numeric parameter values")
        t = entry.get("time")
        compile_s = float(entry.get("compile_time", 0) or 0) / 1e3
        verify_s = float(entry.get("verification_time", 0) or 0) / 1e3
        bench_s = float(entry.get("benchmark_time", 0) or 0) / 1e3
        if isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) and t < 1e19:
            times = tuple(float(x) * 1e3 for x in entry.get("times", []) if isinstance(x, (int, float)))
            results.append(Result(config=config, status="ok", median_us=float(t) * 1e3, times_us=times,
                                  compile_s=compile_s, verify_s=verify_s, time_s=bench_s))
        else:
            status = FAILURES.get(str(t), "launch_error")
            results.append(Result(config=config, status=status, message=f"Kernel Tuner: {t}",
                                  compile_s=compile_s, verify_s=verify_s, time_s=bench_s))
    _need(bool(results), path, "the cache holds no configurations")
    problem_values = {f"dim{i}": v for i, v in enumerate(problem)}
    header = new_header(
        command=["kerntune", "kt-import", str(path)],
        device={"name": device, "backend": "imported"},
        template={"name": kernel, "backend": "imported", "parameters": keys,
                  "tune_params": {k: list(v) for k, v in params.items() if isinstance(v, list)},
                  "default_config": results[0].config, "source": "", "original_source": "",
                  "imported_from": str(path)},
        space={"problem_name": "x".join(map(str, problem)), "problem": problem_values,
               "total": len(results), "feasible": len(results), "pruned": {}},
        tuning={"strategy": "imported", "objective": str(data.get("objective", "time"))},
    )
    with SessionWriter(out, header) as w:
        w.write(RunStarted(0.0, kernel, problem_values, header["space"]["problem_name"], "imported", device,
                           "imported"))
        w.write(SpaceBuilt(0.0, len(results), len(results), {}))
        for i, r in enumerate(results):
            w.write(ConfigEvaluated(float(i), i, r))
        board = ranked(results)
        best = board[0] if board else None
        w.write(RunFinished(float(len(results)), "imported", len(results), len(board),
                            dict(best.config) if best else {}, best.median_us if best else 0.0))
    return out


def export_cache(session: Session) -> dict[str, Any]:
    """A session's results as a Kernel Tuner cache object (schema 1.0.0)."""
    keys = list(session.template.get("parameters") or (session.results()[0].config if session.results() else []))
    values: dict[str, list] = {k: [] for k in keys}
    cache: dict[str, Any] = {}
    stamp = session.info.get("created") or datetime.now(timezone.utc).isoformat()
    for r in session.results():
        row = []
        for k in keys:
            v = r.config.get(k)
            if isinstance(v, bool):
                v = int(v)
            if not isinstance(v, int) or v < 0:
                raise CacheFormatError(f"{session.path}: parameter {k}={v!r} is not a non-negative integer, "
                                       "which Kernel Tuner cache keys require")
            row.append(v)
            if v not in values[k]:
                values[k].append(v)
        entry: dict[str, Any] = {k: v for k, v in zip(keys, row)}
        if r.ranked or r.status == "suspect":
            entry["time"] = r.median_us / 1e3
            entry["times"] = [t / 1e3 for t in r.times_us]
        else:
            entry["time"] = STATUS_TO_FAILURE.get(r.status, "RuntimeFailedConfig")
        entry.update(compile_time=r.compile_s * 1e3, verification_time=r.verify_s * 1e3,
                     benchmark_time=r.time_s * 1e3, strategy_time=0.0, framework_time=0.0, timestamp=stamp)
        cache[",".join(map(str, row))] = entry
    problem = session.space.get("problem", {})
    return {
        "schema_version": SCHEMA_VERSION,
        "device_name": str(session.device.get("name", "")),
        "kernel_name": str(session.template.get("name", "")),
        "problem_size": [int(v) for v in problem.values()] if isinstance(problem, dict) else [],
        "tune_params_keys": keys,
        "tune_params": {k: sorted(v) for k, v in values.items()},
        "objective": "time",
        "cache": cache,
    }
