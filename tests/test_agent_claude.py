"""The `claude` provider on the real Anthropic SDK, against a local fake of the Messages API.

Scripted conversations: a whole loop; a template the gate rejects and its correction; malformed
tool input; 429 then success; 5xx until the client gives up (the rules take over); a stream that
breaks off; timeouts; replies no real server sends (an event that is not JSON, a 200 whose body is
cut off, keep-alive pings for ever), each retried and then handed to the rules; a loop whose every
template fails the gate ends with the original as its verified best. The API key must never reach
a session, a log or the screen.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

anthropic = pytest.importorskip("anthropic")

from anthropic_fake import FakeAnthropic, Reply, broken, error, text, tool  # noqa: E402
from claude_support import KEY, client, loop_options, state, user_blocks  # noqa: E402

from kerntune.agents.claude import ClaudeProvider, redact  # noqa: E402
from kerntune.agents.pricing import cost_usd  # noqa: E402
from kerntune.agents.rules import RulesProvider  # noqa: E402
from kerntune.engine.agent_api import ProviderError  # noqa: E402
from kerntune.engine.events import AgentCall, GateChecked, LoopFinished, Note, PlanMade  # noqa: E402
from kerntune.engine.events import SearchPlanned, TemplateProposed  # noqa: E402
from kerntune.engine.loop import TuningLoop  # noqa: E402
from kerntune.engine.session import load_session  # noqa: E402
from kerntune.engine.template import load_template  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
QUICK = ["--headless", "--no-probe", "--repeats", "5", "--seed", "11"]


@pytest.fixture
def original(tmp_path):
    d = tmp_path / "silu_original"
    shutil.copytree(HERE / "data" / "originals" / "silu_and_mul", d)
    shutil.copyfile(ROOT / "templates" / "silu_and_mul" / "baseline.cu", d / "baseline.cu")
    return d


def proposal(spec: Path, broken: bool = False) -> dict:
    """A propose_template input: the OpenCL original with its work-group size as BLOCK (with
    the sign of the exponent flipped when `broken`: the gate must see different outputs)."""
    src = (spec / "baseline.cl").read_text()
    src = src.replace("#define VEC 8", "#ifndef BLOCK\n#define BLOCK 256\n#endif\n#define VEC 8")
    src = src.replace("reqd_work_group_size(256, 1, 1)", "reqd_work_group_size(BLOCK, 1, 1)")
    if broken:
        src = src.replace("exp(-a)", "exp(a)")
    return {"summary": "the work-group size as BLOCK", "source": src,
            "parameters": [{"name": "BLOCK", "values": [64, 128, 256], "default": 256,
                            "description": "work-items per group"}],
            "launch": {"block": ["BLOCK"]}}


def search(values=(64, 256)) -> dict:
    return {"strategy": "grid", "budget": 0, "values": {"BLOCK": list(values)}, "reason": "both ends"}


# whole conversations ---------------------------------------------------------------------------

def test_a_whole_loop_through_the_cli_with_claude_and_the_key_never_shows(tmp_path, original):
    script = [
        text(f"Lift the work-group size first; it is the one knob of the port.\n(I was told {KEY}.)\nNEXT: template"),
        tool("propose_template", proposal(original), "toolu_01", say="Here is the template."),
        tool("run_search", search(), "toolu_02"),
        text("BLOCK=64 and 256 both verified.\nNEXT: continue"),
    ]
    session = tmp_path / "claude.toml"
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with FakeAnthropic(script) as fake:
        env = {**os.environ, "ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": fake.url, "TMPDIR": str(scratch),
               "PYTHONUNBUFFERED": "1", "KERNTUNE_MODEL": "claude-sonnet-5"}
        # no --agent: with a key set, a spec without parameters goes to Claude
        r = subprocess.run([sys.executable, "-m", "kerntune.tui.cli", "tune", str(original), "--rounds", "1",
                            "--session", str(session), *QUICK], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "agent: claude, model claude-sonnet-5 (ANTHROPIC_API_KEY is set" in r.stdout
    assert len(fake.requests) == 4
    # the key went to the API, in its header (x-api-key or a bearer token), and nowhere else
    assert all(KEY in req["headers"].get("x-api-key", "") + req["headers"].get("authorization", "")
               for req in fake.requests)
    outputs = {"stdout": r.stdout, "stderr": r.stderr}
    for f in [*tmp_path.rglob("*")]:
        if f.is_file():
            outputs[str(f)] = f.read_text(errors="replace")
    for where, content in outputs.items():
        assert KEY not in content, where
        assert "KERNTUNE-TEST-KEY" not in content, where
    assert "[redacted]" in session.read_text()  # the model's echo of it was scrubbed

    s = load_session(session)
    events = s.events
    calls = [e for e in events if isinstance(e, AgentCall)]
    assert [c.role for c in calls] == ["planner", "generator", "tuner", "tester"]
    assert all(c.model == "claude-sonnet-5" and c.input_tokens == 1200 and c.output_tokens == 80 for c in calls)
    assert all(c.cost_usd == pytest.approx(cost_usd("claude-sonnet-5", 1200, 80)) for c in calls)
    assert events[-1].cost_usd == pytest.approx(sum(c.cost_usd for c in calls))
    # streamed text arrived as notes, line by line, with the role as the source
    planner = [e.text for e in events if isinstance(e, Note) and e.source == "planner"]
    assert planner[0] == "Lift the work-group size first; it is the one knob of the port."
    plan = next(e for e in events if isinstance(e, PlanMade))
    assert plan.retemplate and "NEXT" not in plan.text
    assert [e.ok for e in events if isinstance(e, GateChecked)] == [True]
    planned = next(e for e in events if isinstance(e, SearchPlanned))
    assert planned.agent == "claude" and planned.values == {"BLOCK": [64, 256]}
    done = events[-1]
    assert isinstance(done, LoopFinished) and done.best_us > 0 and done.best_us <= done.original_us
    # the best configuration, or the original itself when no configuration beat it
    assert set(done.best) == ({"BLOCK"} if not done.kept_original else set())

    # what the SDK sent: the stable prefix cached, the tools, the gate's verdict and the results
    first = fake.requests[0]["body"]
    assert first["stream"] is True and first["model"] == "claude-sonnet-5"
    assert first["system"][1]["cache_control"] == {"type": "ephemeral"}
    assert "__kernel __attribute__((reqd_work_group_size(256, 1, 1)))" in first["system"][1]["text"]
    assert {t["name"] for t in first["tools"]} == {"read_kernel", "read_device_limits", "read_results",
                                                   "read_profile", "apply_rewrites", "propose_template",
                                                   "run_search"}
    verdict = user_blocks(fake.requests[2])[0]
    assert verdict["type"] == "tool_result" and verdict["tool_use_id"] == "toolu_01"
    assert verdict["content"].startswith("accepted:") and "reproduces the original's outputs" in verdict["content"]
    results = user_blocks(fake.requests[3])[0]
    assert results["tool_use_id"] == "toolu_02" and "BLOCK=64" in results["content"]
    assert user_blocks(fake.requests[3])[-1]["cache_control"] == {"type": "ephemeral"}


def test_a_template_the_gate_rejects_goes_back_with_the_reason_and_the_correction_passes(tmp_path, original):
    script = [
        text("Template it.\nNEXT: template"),
        tool("propose_template", proposal(original, broken=True), "toolu_bad"),
        tool("propose_template", proposal(original), "toolu_good", say="Fixed the sign."),
    ]
    with FakeAnthropic(script) as fake:
        claude = ClaudeProvider("claude-sonnet-5", client=client(fake))
        events = []
        out = TuningLoop(load_template(original), [claude, RulesProvider()],
                         loop_options(tmp_path, templatize_only=True), [events.append]).run()
    assert out.template is not None and [p.name for p in out.template.parameters] == ["BLOCK"]
    gates = [e for e in events if isinstance(e, GateChecked)]
    assert [g.ok for g in gates] == [False, True]
    assert "outside tolerance" in gates[0].reason or "NaN" in gates[0].reason
    assert [e.attempt for e in events if isinstance(e, TemplateProposed)] == [1, 2]
    back = user_blocks(fake.requests[2])[0]
    assert back["tool_use_id"] == "toolu_bad" and back["is_error"] is True
    assert back["content"].startswith("rejected by the gate:") and gates[0].reason in back["content"]
    assert out.agents == ["claude"]


def test_five_hundreds_until_the_sdk_gives_up_hand_the_loop_to_the_rules_and_lose_nothing(tmp_path, original):
    busy = [error(500, "api_error", f"internal error (key {KEY})", retry_after_ms="5") for _ in range(3)]
    script = [text("Template it.\nNEXT: template"), tool("propose_template", proposal(original), "toolu_01"), *busy]
    with FakeAnthropic(script) as fake:
        claude = ClaudeProvider("claude-sonnet-5", client=client(fake, max_retries=2))
        events = []
        out = TuningLoop(load_template(original), [claude, RulesProvider()],
                         loop_options(tmp_path, budget=4), [events.append]).run()
    assert len(fake.requests) == 5  # the tuner's request, tried three times
    assert out.agents == ["claude", "rules"]
    handover = [e.text for e in events if isinstance(e, Note) and e.source == "loop" and "takes over" in e.text]
    assert len(handover) == 1 and "the claude provider failed as tune" in handover[0]
    assert "500" in handover[0] and KEY not in handover[0] and "[redacted]" in handover[0]
    # Claude's accepted template is kept and searched by the rules' tuner; the original's timing too
    planned = next(e for e in events if isinstance(e, SearchPlanned))
    assert planned.agent == "rules" and set(planned.values) == {"BLOCK"}
    assert out.original is not None and out.original.verified
    # (on the CPU the original may stay: then its rival is the fastest configuration searched)
    searched = out.beaten if out.kept_original else out.best
    assert searched is not None and set(searched.config) == {"BLOCK"}
    s = load_session(tmp_path / "loop.toml")
    assert isinstance(s.events[-1], LoopFinished) and len([e for e in s.events if isinstance(e, AgentCall)]) == 2
    assert KEY not in (tmp_path / "loop.toml").read_text()


# single turns ----------------------------------------------------------------------------------

def test_malformed_tool_input_is_answered_with_the_error_and_the_retry_is_used(tmp_path, original):
    script = [tool("propose_template", {"source": 42, "parameters": "BLOCK"}, "toolu_x"),
              tool("propose_template", proposal(original), "toolu_y")]
    said, events = [], []
    with FakeAnthropic(script) as fake:
        p = ClaudeProvider("claude-sonnet-5", client=client(fake))
        got = p.generate(state(original, said, events), None)
    assert [x.name for x in got.parameters] == ["BLOCK"] and got.block == ("BLOCK",)
    answer = user_blocks(fake.requests[1])[0]
    assert answer["tool_use_id"] == "toolu_x" and answer["is_error"] is True
    assert answer["content"] == "invalid input: `source` must be the whole template source, as a string"
    assert fake.requests[0]["body"]["tool_choice"] == {"type": "any"}
    assert len(events) == 2 and all(isinstance(e, AgentCall) and e.t == 1.5 for e in events)


def test_a_429_is_retried_after_the_time_the_api_asks_for(original):
    script = [error(429, "rate_limit_error", "slow down", retry_after_ms="200"), text("Plan.\nNEXT: template")]
    said, events = [], []
    with FakeAnthropic(script) as fake:
        p = ClaudeProvider("claude-sonnet-5", client=client(fake))
        t0 = time.monotonic()
        plan = p.plan(state(original, said, events))
        waited = time.monotonic() - t0
    assert plan.text == "Plan." and plan.retemplate
    assert len(fake.requests) == 2 and waited >= 0.2
    assert len(events) == 1  # the failed attempt cost nothing


def test_a_stream_that_breaks_off_is_retried(original):
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    script = [Reply([("text", "Half a plan")], stream_error=overloaded), text("A whole plan.\nNEXT: search")]
    said, events, slept = [], [], []
    with FakeAnthropic(script) as fake:
        p = ClaudeProvider("claude-sonnet-5", client=client(fake), sleep=slept.append)
        plan = p.plan(state(original, said, events))
    assert plan.text == "A whole plan." and len(fake.requests) == 2 and len(slept) == 1
    assert any("the stream broke off" in s and "overloaded" in s.lower() for _, s in said)


def test_a_reply_slower_than_the_timeout_is_retried_and_one_that_never_comes_gives_up(original):
    said, events = [], []
    with FakeAnthropic([Reply([("text", "late")], delay=2.0), text("On time.\nNEXT: template")]) as fake:
        p = ClaudeProvider("claude-sonnet-5", client=client(fake, timeout=0.5, max_retries=1))
        assert p.plan(state(original, said, events)).text == "On time."
    assert len(fake.requests) == 2
    with FakeAnthropic([Reply([("text", "late")], delay=2.0) for _ in range(2)]) as fake:
        p = ClaudeProvider("claude-sonnet-5", client=client(fake, timeout=0.5, max_retries=1))
        with pytest.raises(ProviderError, match="APITimeoutError"):
            p.plan(state(original, said, events))
        assert len(fake.requests) == 2


FAULTS = ["bad_event_json", "bad_body", "pings"]


@pytest.mark.parametrize("fault", FAULTS)
def test_an_unusable_reply_is_retried_and_one_that_stays_unusable_gives_up(original, fault):
    said, events, slept = [], [], []
    with FakeAnthropic([broken(fault), text("A whole plan.\nNEXT: template")]) as fake:
        p = ClaudeProvider("claude-sonnet-5", client=client(fake), sleep=slept.append, call_deadline=1.0)
        t0 = time.monotonic()
        assert p.plan(state(original, said, events)).text == "A whole plan."
        assert time.monotonic() - t0 < 8
    assert len(fake.requests) == 2 and len(slept) == 1 and len(events) == 1
    assert any(s.startswith("the reply was unusable") for _, s in said)
    with FakeAnthropic([broken(fault) for _ in range(3)]) as fake:
        p = ClaudeProvider("claude-sonnet-5", client=client(fake), sleep=slept.append, call_deadline=1.0)
        with pytest.raises(ProviderError, match="no whole reply within the call's deadline of 1 s"
                           if fault == "pings" else "a malformed reply"):
            p.plan(state(original, said, events))
    assert len(fake.requests) == 3  # the first try and its two retries


def test_malformed_replies_hand_the_loop_to_the_rules_which_finish_it(tmp_path, original):
    script = [text("Template it.\nNEXT: template"), *[broken("bad_body") for _ in range(3)]]
    with FakeAnthropic(script) as fake:
        claude = ClaudeProvider("claude-sonnet-5", client=client(fake), sleep=lambda s: None, call_deadline=1.0)
        events = []
        out = TuningLoop(load_template(original), [claude, RulesProvider()],
                         loop_options(tmp_path, budget=2), [events.append]).run()
    assert len(fake.requests) == 4 and out.agents == ["claude", "rules"]
    handover = [e.text for e in events if isinstance(e, Note) and "takes over" in e.text]
    assert len(handover) == 1 and "failed as generate" in handover[0] and "malformed reply" in handover[0]
    assert out.best is not None and out.best.verified and isinstance(events[-1], LoopFinished)


def test_when_every_template_fails_the_gate_the_original_is_the_verified_best(tmp_path, original, capsys,
                                                                              monkeypatch):
    from kerntune.tui.cli import main

    script = [broken("pings"), text("Template it.\nNEXT: template"),
              *[tool("propose_template", proposal(original, broken=True), f"toolu_{i}") for i in range(3)]]
    session = tmp_path / "kept.toml"
    with FakeAnthropic(script) as fake:
        monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
        monkeypatch.setenv("KERNTUNE_CLAUDE_DEADLINE", "1.5")
        code = main(["tune", str(original), "--agent", "claude", "--rounds", "1", "--session", str(session),
                     *QUICK])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert len(fake.requests) == 5  # the planner's call past its deadline was tried again
    assert "no configuration was verified: the original kernel stays" in out
    assert "best:      the original stays" in out and "no configuration was verified" not in err
    s = load_session(session)
    finished = s.events[-1]
    assert isinstance(finished, LoopFinished) and finished.kept_original and finished.best_us > 0
    assert [e.ok for e in s.events if isinstance(e, GateChecked)] == [False, False, False]


def test_without_a_key_the_claude_agent_is_one_line(original, capsys, monkeypatch):
    from kerntune.tui.cli import main

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    code = main(["tune", str(original), "--agent", "claude", *QUICK])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "ANTHROPIC_API_KEY is not set" in err


def test_costs_and_redaction():
    assert cost_usd("claude-sonnet-5", 1_000_000, 0) == pytest.approx(2.0)
    assert cost_usd("claude-sonnet-5-5", 0, 1_000_000) == pytest.approx(10.0)
    assert cost_usd("claude-sonnet-5-20260601", 0, 0, cache_read=1_000_000, cache_write=1_000_000) == \
        pytest.approx(0.2 + 2.5)
    assert cost_usd("some-other-model", 1000, 1000) == 0.0
    assert redact("x sk-ant-api03-abcdefgh y") == "x sk-ant-[redacted] y"
    assert json.dumps(redact("plain text")) == '"plain text"'
