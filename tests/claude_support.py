"""Shared steps of the Claude provider's tests: the SDK's client on the fake Messages API, a loop
state and loop options on the OpenCL backend (PoCL), and the blocks of a request's last turn."""

from __future__ import annotations

from pathlib import Path

import anthropic

from anthropic_fake import FakeAnthropic
from kerntune.engine.agent_api import LoopState
from kerntune.engine.device import DeviceLimits
from kerntune.engine.evaluate import TimingPolicy
from kerntune.engine.loop import LoopOptions
from kerntune.engine.template import load_template
from kerntune.engine.tune import TuneOptions

KEY = "sk-ant-api03-KERNTUNE-TEST-KEY-5f3a9c1e"


def client(fake: FakeAnthropic, **kw) -> anthropic.Anthropic:
    """The real SDK's client, talking to the fake."""
    return anthropic.Anthropic(base_url=fake.url, api_key=KEY, **{"max_retries": 2, "timeout": 10, **kw})


def state(spec: Path, said: list, events: list) -> LoopState:
    """Round 1 of 2 on the OpenCL backend, no template yet; what is said and recorded is kept."""
    t = load_template(spec)
    return LoopState(round=1, rounds=2, backend="opencl", limits=DeviceLimits("opencl", "cpu"), problem=t.problem(),
                     original=t, original_result=None, template=None, template_dir=None, history=(), best=None,
                     best_round=0, sol_us=None, sol_target=0.9, budget=0, last_verdict=None,
                     say=lambda s, r: said.append((r, s)), record=events.append, now=lambda: 1.5)


def loop_options(tmp_path: Path, **kw) -> LoopOptions:
    """One round on OpenCL, five timed repetitions, the session in tmp_path."""
    tune = TuneOptions(backend="opencl", probe=False, seed=11, session_path=tmp_path / "loop.toml",
                       timing=TimingPolicy(min_repeats=5, max_repeats=5))
    return LoopOptions(tune=tune, **{"rounds": 1, **kw})


def user_blocks(request: dict) -> list:
    """The content blocks of a recorded request's last (user) turn."""
    return request["body"]["messages"][-1]["content"]
