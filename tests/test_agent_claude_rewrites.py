"""Claude asks for the rules' rewrites through the apply_rewrites tool, against the fake Messages API.

A naive three-pass softmax (tests/data/naive/softmax_3pass, OpenCL on PoCL): Claude makes the
algorithmic change itself (one online pass), has kerntune's own rewriting code spread, keep and
chain it, proposes the result by reference, and the gate and the search take it like any
proposal. A rewrite the analysis declines comes back with its reason; a malformed input is one
tool_result error and the conversation goes on.
"""

import shutil
from pathlib import Path

import pytest

pytest.importorskip("anthropic")

from anthropic_fake import FakeAnthropic, text, tool  # noqa: E402
from claude_support import client, loop_options, state, user_blocks  # noqa: E402
from rewrite_support import skip_where_lane_groups_are_miscompiled  # noqa: E402

from kerntune.agents.claude import ClaudeProvider  # noqa: E402
from kerntune.agents.rules import RulesProvider, rules_template  # noqa: E402
from kerntune.engine.device import DeviceLimits  # noqa: E402
from kerntune.engine.events import AgentCall, GateChecked, LoopFinished, SearchPlanned  # noqa: E402
from kerntune.engine.events import TemplateProposed  # noqa: E402
from kerntune.engine.loop import TuningLoop  # noqa: E402
from kerntune.engine.template import load_template  # noqa: E402

NAIVE = Path(__file__).resolve().parent / "data" / "naive"
ALL = ["lift", "elementwise", "rowwise", "rowwise_keep", "rowwise_chains"]


@pytest.fixture
def softmax(tmp_path):
    d = tmp_path / "softmax_3pass"
    shutil.copytree(NAIVE / "softmax_3pass", d)
    return d


def online_source() -> str:
    """The three-pass softmax made one online pass and a write pass: Claude's algorithmic change
    (the same kernel name and arguments as the original)."""
    return (NAIVE / "softmax_online" / "kernel.cl").read_text().replace("softmax_online", "softmax_3pass")


def result_text(fake: FakeAnthropic, request: int, tool_id: str) -> dict:
    return next(b for b in user_blocks(fake.requests[request]) if b.get("tool_use_id") == tool_id)


def test_claude_makes_the_softmax_online_has_the_rules_spread_it_and_the_loop_tunes_it(tmp_path, softmax):
    skip_where_lane_groups_are_miscompiled()
    ask = {"source": online_source(), "rewrites": ALL,
           "values": {"BLOCK": [32, 128], "LANES": [1, 32], "KEEP": [0, 8], "VEC": [1], "CHAINS": [1, 2]}}
    script = [
        text("Three passes over each row: one online pass first, then the rules' row stages.\nNEXT: template"),
        tool("apply_rewrites", {"rewrites": "rowwise"}, "toolu_bad"),
        tool("apply_rewrites", ask, "toolu_rw"),
        tool("propose_template", {"from_rewrites": "rewrites-1"}, "toolu_prop"),
        tool("run_search", {"strategy": "grid", "budget": 0,
                            "values": {"BLOCK": [32, 128], "LANES": [1, 32], "KEEP": [0], "CHAINS": [1, 2]}},
             "toolu_s"),
        text("The online pass with the rules' stages verified.\nNEXT: stop"),
    ]
    with FakeAnthropic(script) as fake:
        claude = ClaudeProvider("claude-sonnet-5", client=client(fake))
        events = []
        out = TuningLoop(load_template(softmax), [claude, RulesProvider()], loop_options(tmp_path),
                         [events.append]).run()
    assert out.agents == ["claude"]
    # the malformed input: one error, and the next request carries on
    bad = result_text(fake, 2, "toolu_bad")
    assert bad["is_error"] is True
    assert bad["content"] == ("invalid input: `rewrites` must be a non-empty list of names among lift, elementwise, "
                              "rowwise, rowwise_keep, rowwise_chains, contraction, reduction, stencil, "
                                  "fast_math")
    # the rewrites made on Claude's source, and the one the analysis declines, with its reason
    made = result_text(fake, 3, "toolu_rw")
    assert "is_error" not in made and made["content"].startswith("rewrites-1: a template of 5 parameters for opencl")
    lines = made["content"].splitlines()
    assert lines[lines.index("declined:") + 1] == ("- elementwise: the kernel is not elementwise (a thread per row "
                                                   "`i`, 2 loop(s) over the row)")
    assert any(line.startswith("- rowwise_chains: maxval and sum split into CHAINS") for line in lines)
    assert "- CHAINS in [1, 2] (default 1)" in made["content"] and "maxval_prev" in made["content"]
    # the gate took it as proposed by reference: the rules' source, parameters and launch
    proposed = next(e for e in events if isinstance(e, TemplateProposed))
    assert proposed.agent == "claude" and proposed.parameters == ("BLOCK", "LANES", "KEEP", "VEC", "CHAINS")
    assert "maxval_prev" in proposed.source and "#ifndef CHAINS" in proposed.source
    assert [g.ok for g in events if isinstance(g, GateChecked)] == [True]
    verdict = result_text(fake, 4, "toolu_prop")
    assert verdict["content"].startswith("accepted:")
    # and the search measured it: LANES=1 or LANES=BLOCK on OpenCL, each with one and two chains
    planned = next(e for e in events if isinstance(e, SearchPlanned))
    assert planned.agent == "claude"
    assert planned.values == {"BLOCK": [32, 128], "LANES": [1, 32], "KEEP": [0], "VEC": [1], "CHAINS": [1, 2]}
    measured = {(r["BLOCK"], r["LANES"], r["CHAINS"]) for r in (x.config for x in out.rounds[0].results)}
    assert measured == {(b, lanes, c) for b, lanes in ((32, 1), (128, 1), (32, 32)) for c in (1, 2)}
    assert all(r.verified for r in out.rounds[0].results)
    assert isinstance(events[-1], LoopFinished) and events[-1].best_us > 0
    assert [c.role for c in events if isinstance(c, AgentCall)] == \
        ["planner", "generator", "generator", "generator", "tuner", "tester"]


def test_a_declined_rewrite_comes_back_with_its_reason_and_the_result_is_the_rules_own(softmax):
    script = [
        tool("apply_rewrites", {"rewrites": ["lift", "rowwise", "rowwise_keep", "rowwise_chains"]}, "toolu_1"),
        tool("propose_template", {"from_rewrites": "rewrites-9"}, "toolu_2"),
        tool("propose_template", {"from_rewrites": "rewrites-1", "constraints": ["LANES <= 32"]}, "toolu_3"),
    ]
    said, events = [], []
    with FakeAnthropic(script) as fake:
        p = ClaudeProvider("claude-sonnet-5", client=client(fake))
        got = p.generate(state(softmax, said, events), None)
    answer = result_text(fake, 1, "toolu_1")["content"]
    assert "- rowwise_chains: no pass carries a value through an exponential from one element to the next" in answer
    assert answer.index("declined:") < answer.index("- rowwise_chains:")
    wrong = result_text(fake, 2, "toolu_2")
    assert wrong["is_error"] is True and wrong["content"] == ("invalid input: `from_rewrites` must name an "
                                                              "apply_rewrites result (rewrites-1)")
    # what the rules' generator would make, for the backend in use, with Claude's one change
    rules = rules_template(load_template(softmax), "opencl", DeviceLimits("opencl", "cpu"), {"fast_math"}).proposal
    assert got.sources == {"opencl": rules.sources["opencl"]}
    assert got.parameters == rules.parameters and (got.grid, got.block) == (rules.grid, rules.block)
    assert got.constraints == ("LANES <= 32",)
    assert got.notes[-1] == "proposed from the rules' rewrites rewrites-1, its constraints replaced"


@pytest.mark.parametrize("ask, error", [
    ({"rewrites": ["rowwise_keep"]}, "rowwise_keep builds on rowwise: ask for both"),
    ({"leave_out": ["LANES"]}, "`leave_out` names LANES, a parameter of the rowwise rewrite, not a lift: leave the "
                               "rewrite out of `rewrites`, or keep LANES at its default with `values`"),
    ({"values": {"TILE": [1, 2]}}, "`values` names 'TILE', which is no parameter of the template the rewrites make "
                                   "(BLOCK, LANES, KEEP, VEC, FAST_MATH)"),
    ({"source": "int x;"}, "`source` cannot be read as the kernel softmax_3pass: no __global__ or __kernel "
                           "function in the source"),
])
def test_an_apply_rewrites_input_kerntune_cannot_act_on_is_one_error(softmax, ask, error):
    from kerntune.agents.claude import ToolInputError, _parse_rewrites, rewritten

    with pytest.raises(ToolInputError) as e:
        rewritten(_parse_rewrites(ask), state(softmax, [], []))
    assert str(e.value) == error


def test_leaving_out_a_lift_and_pinning_values_change_only_those(softmax):
    from kerntune.agents.claude import _parse_rewrites, rewritten

    got, lines = rewritten(_parse_rewrites({"rewrites": ["lift", "rowwise"], "leave_out": ["BLOCK"],
                                            "values": {"LANES": [4, 32]}}), state(softmax, [], []))
    assert [p.name for p in got.parameters] == ["LANES", "ROWS"]
    assert got.parameters[0].values == (1, 4, 32)  # the default that reproduces the original is kept
    assert "note: LANES's default 1 kept among its values (it reproduces the original)" in lines
    assert lines[lines.index("declined:") + 1] == "- lift: nothing lifted with BLOCK left out as asked"
    assert got.block == ("LANES * ROWS",) and got.grid == ("ceil_div(N, ROWS)",)
