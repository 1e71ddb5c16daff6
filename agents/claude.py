"""The `claude` provider: the four roles played by Claude through the Anthropic SDK.

One conversation runs through the whole loop. Each role is a user turn that names the role; Claude
answers with text (planner, tester) or with a tool call (generator: propose_template, tuner:
run_search), reading the kernel, the device limits and the results through tools on the way. A
proposal comes back to the loop as plain data; the gate's verdict and the search's results go back
to Claude as that tool call's result at its next turn, so a rejected template returns with the reason.

Through apply_rewrites Claude has the rules' own lifts and rewrites made (agents/rules.py's
rules_template, the code the rules provider runs) on the original or on a source of its own, sees
the template they make and what was declined and why, and proposes it by reference
(propose_template's `from_rewrites`), as it is or edited; it goes through the gate like any
proposal. Claude's tokens go to what the rules cannot do, such as an algorithmic change.

- streaming: text arrives as Note events, a line at a time, with the role as their source;
- prompt caching: the stable prefix (tools, system prompt, kernel, device limits) carries a
  cache_control breakpoint, and so does the newest turn;
- retries: the SDK retries 408/409/429/5xx and connection errors with exponential back-off and
  jitter (honouring retry-after); a stream that fails midway is retried here the same way;
- timeouts: every request has one; a timeout is retried like a 5xx;
- a deadline: every model call has a wall-clock deadline (`call_deadline`, else
  KERNTUNE_CLAUDE_DEADLINE seconds, else four minutes), which a stream of keep-alive pings cannot
  put off; a reply that is malformed (an event that is not JSON, a body cut off) or past its
  deadline is retried like a broken stream, and then the provider gives up (ProviderError), so
  that the loop hands the role on;
- accounting: every call is an AgentCall event with its tokens (cache reads and writes apart) and
  its cost;
- secrets: the SDK reads ANTHROPIC_API_KEY itself; it is never passed, stored or printed, and
  every text this provider emits is scrubbed of it.

`anthropic` is imported only when the provider is made: kerntune runs without it.
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Callable

from kerntune.engine.agent_api import LoopState, Plan, ProviderError, Report, RoundRecord, SearchPlan
from kerntune.engine.device import describe
from kerntune.engine.events import AgentCall
from kerntune.engine.proposal import ParamProposal, TemplateProposal
from kerntune.engine.result import config_label
from kerntune.engine.search import STRATEGIES

from .analysis import results_table, round_analysis, sol_line, sol_table, us
from .kernel_tree import KernelTreeError, classify
from .lift import lift_template
from .pricing import cost_usd
from .passes import PARAM_KINDS, builds_on
from .passes import names as pass_names
from .rules import rules_template  # fills the pass registry (agents/rewrites.py)

# Claude Sonnet 5: the models overview's "best combination of speed and intelligence", with tool
# use and prompt caching. `--model` or KERNTUNE_MODEL picks another (claude-opus-5-5, ...).
DEFAULT_MODEL = "claude-sonnet-5"
MODEL_ENV = "KERNTUNE_MODEL"
KEY_ENV = "ANTHROPIC_API_KEY"
DEADLINE_ENV = "KERNTUNE_CLAUDE_DEADLINE"
DEFAULT_DEADLINE = 240.0  # seconds a model call may take, whatever the endpoint sends

SYSTEM = """\
You are the agents of kerntune, a tuner for GPU kernels, working in four roles as the two-stage \
tuner of Qu and Sui has them. Each user turn names the role you play in it:

- planner: decide what this round tries, from the results so far and the speed-of-light headroom.
- generator: rewrite the original kernel into a template: the same computation, with its \
performance choices (threads per block, vector width, items or rows per thread, unroll factors, \
staging in shared memory, fast-math intrinsics, ...) made explicit parameters. Call propose_template \
(after apply_rewrites, for what the rules' rewrites can make).
- tuner: choose the value lists to search, the strategy and the budget. Call run_search.
- tester: read the verification and timing results and write a short analysis.

Templates. Parameters reach the source as preprocessor defines (-DNAME=value). The source must keep \
`#ifndef NAME` / `#define NAME default` / `#endif` for every parameter so that it compiles alone, \
and the default configuration must reproduce the original kernel exactly: same arguments in the \
same order, same results. Every parameter must be used beyond its #ifndef default (in the source \
or in the launch geometry). `#pragma unroll N` does not expand macros: use \
`_Pragma` on a stringised argument. The engine checks every proposal before it is used: the spec \
loads, every parameter is used, the source compiles, and the default configuration reproduces \
the original's outputs on fresh random inputs. A rejected proposal comes back with the reason.

The rules' rewrites. apply_rewrites runs kerntune's own rewriting code, which reads the kernel's \
syntax tree and makes a change only where its analysis proves it safe, else declines it with the \
reason: `lift` (literals with tunable names, #pragma unroll counts and the launch's block size \
become parameters), `elementwise` (a thread per element gains VEC packs, ITEMS per thread, a GRID \
stride and, on CUDA, CACHE hints and launch BOUNDS), `rowwise` (a thread per row gains LANES threads \
a row, their sums, maxima and online softmax pairs combined by shuffles or shared memory, and ROWS \
a block), `rowwise_keep` (on rowwise: KEEP elements of the row in registers between passes, moved \
in VEC packs), `rowwise_chains` (on rowwise_keep: CHAINS independent chains of a pass carried \
through an exponential), `contraction` (a thread per output summing products of two operands, a \
matrix product in either layout with any epilogue, or such a product already tiled by hand through \
two shared tiles a block fills at each step, read as the product its tiles compose to: BM x BN tiles \
through shared memory in BK steps, BK = 0 the original, TM x TN outputs per thread in registers, VEC \
4 loading the tiles as vectors, any size), `reduction` (a \
block's shared-memory tree: per-block partials over LANES threads a segment with shuffles, or an \
atomic total striding GRID blocks per multiprocessor with ITEMS loads in flight), `histogram` (threads \
counting elements into bins by atomic adds: PRIVATE = 1 privatises the bins per block in shared \
memory, merged by one atomic per non-zero bin, COPIES of them a block; ITEMS elements per thread, \
STRIDED or consecutive, GRID blocks per multiprocessor), `stencil` (a \
thread per point of a 1-D or 2-D grid: ITEMS points per thread along one axis, in 2-D RX along x too, \
a block's width apart, pointers restricted; TILE = 1 stages each input read at the point's neighbours, with its halo, in shared memory first) \
and `transpose` (a thread per element whose store moves along the other axis than its read: TILE x TILE \
tiles through shared memory, TILE = 0 the original, read along the input's rows and written along the \
output's by TILE x ROWS threads, PAD 1 against bank conflicts, any size). \
Do not write these by hand: spend your effort on what they cannot do (an algorithmic change such as \
turning a three-pass softmax into an online one, fusing passes, double buffering), pass your source to apply_rewrites to get the mechanical parameters on \
top, and propose its result by reference with propose_template {"from_rewrites": "<name>"}, \
adding or replacing only the fields you change.

Expressions (constraints, launch grid and block, shared_bytes) are arithmetic over parameter \
names, problem sizes and device names (max_threads_per_block, max_shared_per_block, \
max_shared_per_block_optin, warp_size, sm_count, max_regs_per_block, max_cluster_blocks): + - * / // % **, comparisons, and/or/not, \
`a if c else b`, and the functions min, max, ceil_div, round_up, log2, is_pow2, abs. Nothing else.

Be brief: a plan or an analysis is a few sentences. A result measured faster than the speed of \
light is flagged suspect: a broken measurement or cost model, never a win.
"""

READ_TOOLS = ("read_kernel", "read_device_limits", "read_results", "read_profile")
LIFT = "lift"  # apply_rewrites' name for the literals lifted into parameters
REWRITE_NAMES = (LIFT, *pass_names())  # the registered passes, by name
NOT_ASKED = "not asked for"
NUMBER = {"type": ["integer", "number", "boolean"]}

TOOLS: list[dict[str, Any]] = [
    {
        "name": "read_kernel",
        "description": "The original kernel's spec and source, and the current template's, if one was accepted.",
        "input_schema": {"type": "object", "properties": {}},
    },
    {
        "name": "read_device_limits",
        "description": "The device's limits (threads per block, shared memory, registers, ...) and peak rates.",
        "input_schema": {"type": "object", "properties": {}},
    },
    {
        "name": "read_results",
        "description": "Verified results (fastest first) and failures by status, of one round or of all rounds.",
        "input_schema": {
            "type": "object",
            "properties": {
                "round": {"type": "integer", "description": "a round number; all rounds when left out"},
                "limit": {"type": "integer", "description": "how many of the fastest to list (default 15)"},
            },
        },
    },
    {
        "name": "read_profile",
        "description": ("Nsight Compute's metrics for the leading configurations profiled so far: DRAM throughput "
                        "against peak, SM throughput, occupancy, cache hit rates, the top warp stall reasons, "
                        "registers and shared memory, and the bound they point to (memory, compute, latency)."),
        "input_schema": {"type": "object", "properties": {}},
    },
    {
        "name": "apply_rewrites",
        "description": ("Make the rules' lifts and rewrites (kerntune's own code, proven safe by its syntax-tree "
                        "analysis) on the original kernel or on a source you give, and see the template they make: "
                        "source, parameters, constraints, launch, and each rewrite asked for that was declined, "
                        "with the reason. Nothing is proposed: propose the result with propose_template "
                        "{\"from_rewrites\": <its name>}, as it is or with the fields you change. Any role."),
        "input_schema": {
            "type": "object",
            "properties": {
                "rewrites": {"type": "array", "items": {"type": "string", "enum": list(REWRITE_NAMES)},
                             "description": ("which to make (all when left out), in the order they run; a pass "
                                             "needs the one it builds on: " + ", ".join(
                                                 f"{n} needs {b}" for n, b in builds_on().items() if b))},
                "source": {"type": "string",
                           "description": ("a whole source for the backend in use to rewrite instead of the "
                                           "original: the same kernel and arguments, after a change of your own")},
                "leave_out": {"type": "array", "items": {"type": "string"},
                              "description": "parameters of the lifts to leave out, by name (BLOCK, UNROLL, ...)"},
                "values": {"type": "object", "additionalProperties": {"type": "array", "items": NUMBER},
                           "description": "value lists replacing the rules' own, by parameter; the default is kept"},
            },
        },
    },
    {
        "name": "propose_template",
        "description": ("Propose a template of the original kernel (generator only): the source for the "
                        "backend in use, its parameters, constraints and launch geometry; or `from_rewrites`, "
                        "an apply_rewrites result taken as it is, with any field given here replacing its own."),
        "input_schema": {
            "type": "object",
            "properties": {
                "from_rewrites": {"type": "string",
                                  "description": "the name of an apply_rewrites result (rewrites-1, ...)"},
                "summary": {"type": "string", "description": "one line: what the template makes tunable"},
                "source": {"type": "string", "description": "the whole template source"},
                "parameters": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string"},
                            "values": {"type": "array", "items": NUMBER},
                            "default": NUMBER,
                            "description": {"type": "string"},
                            "kind": {"type": "string", "enum": list(PARAM_KINDS),
                                     "description": ("what it tunes: the tuner orders and spreads its values by "
                                                     "its kind (threads, vector width, work per thread, tile, "
                                                     "flag, unroll, ...)")},
                        },
                        "required": ["name", "values", "default"],
                    },
                },
                "constraints": {"type": "array", "items": {"type": "string"}},
                "launch": {
                    "type": "object",
                    "properties": {
                        "grid": {"type": "array", "items": {"type": ["string", "integer"]}},
                        "block": {"type": "array", "items": {"type": ["string", "integer"]}},
                        "shared_bytes": {"type": ["string", "integer"]},
                    },
                },
            },
        },
    },
    {
        "name": "run_search",
        "description": ("Search the accepted template (tuner only): value lists per parameter (the default "
                        "is always kept), a strategy and a budget of evaluations."),
        "input_schema": {
            "type": "object",
            "properties": {
                "strategy": {"type": "string", "enum": list(STRATEGIES)},
                "budget": {"type": "integer", "description": "evaluations; 0 = all of the space"},
                "values": {"type": "object", "additionalProperties": {"type": "array"}},
                "reason": {"type": "string"},
            },
            "required": ["strategy"],
        },
    },
]


class ToolInputError(ValueError):
    """A tool call whose input does not have the shape its schema asks for."""


def redact(text: str) -> str:
    """Text with the API key (and anything shaped like an Anthropic key) taken out."""
    key = os.environ.get(KEY_ENV, "")
    if len(key) >= 8:
        text = text.replace(key, "[redacted]")
    return re.sub(r"sk-ant-[A-Za-z0-9_\-]{4,}", "sk-ant-[redacted]", text)


class ClaudeProvider:
    """Planner, generator, tuner and tester played by Claude; one conversation per loop."""

    name = "claude"

    def __init__(self, model: str | None = None, *, client: Any = None, max_tokens: int = 8192,
                 timeout: float = 120.0, max_retries: int = 4, stream_retries: int = 2, max_turns: int = 8,
                 sleep: Callable[[float], None] = time.sleep, call_deadline: float | None = None):
        try:
            import anthropic
        except ImportError:
            raise ProviderError("the claude provider needs the anthropic package "
                                "(pip install 'kerntune[claude]')") from None
        self._anthropic = anthropic
        # what a request or a stream may raise: the SDK's errors, and its HTTP library's own
        # transport errors, which surface unwrapped when a stream breaks off midway
        self._errors: tuple[type[BaseException], ...] = (anthropic.AnthropicError, *_transport_errors())
        self.model = model or os.environ.get(MODEL_ENV) or DEFAULT_MODEL
        if client is None:
            if not os.environ.get(KEY_ENV):
                raise ProviderError(f"{KEY_ENV} is not set")
            # the SDK reads the key from the environment itself; we never hold it
            client = anthropic.Anthropic(max_retries=max_retries, timeout=timeout)
        self.client = client
        self.max_tokens = max_tokens
        self.stream_retries = stream_retries
        self.call_deadline = call_deadline if call_deadline is not None else _deadline_from_env()
        self.max_turns = max_turns
        self._sleep = sleep
        self.messages: list[dict[str, Any]] = []
        # tool calls of the last assistant turn not answered yet: (id, name, its result when known);
        # the API wants them all answered at the start of the next user turn
        self._pending: list[tuple[str, str, dict[str, Any] | None]] = []
        self._system: list[dict[str, Any]] | None = None
        self._rewritten: dict[str, TemplateProposal] = {}  # apply_rewrites' results by name, for from_rewrites

    # the roles ---------------------------------------------------------------------------------
    def plan(self, state: LoopState) -> Plan:
        text = self._turn(state, "planner", self._plan_prompt(state), want=None)
        decision = _next(text)
        return Plan(_without_next(text), retemplate=decision == "template" or state.template is None,
                    stop=decision == "stop" and state.template is not None)

    def generate(self, state: LoopState, rejection: str | None) -> TemplateProposal:
        if rejection is not None:
            prompt = ("[generator] The gate rejected the proposal (see the tool result). Fix what it names "
                      "and call propose_template again.")
        else:
            prompt = (f"[generator] Round {state.round}: propose a template of the original kernel for the "
                      f"{state.backend} backend with propose_template (apply_rewrites makes the rules' rewrites "
                      "for you to propose by reference).")
        return self._turn(state, "generator", prompt, want="propose_template", rejection=rejection)

    def tune(self, state: LoopState) -> SearchPlan:
        t = state.template
        assert t is not None
        params = "; ".join(f"{p.name} in {list(p.values)} (default {p.default})" + (f" [{p.kind}]" if p.kind else "")
                           for p in t.parameters)
        cap = f" At most {state.budget} evaluations." if state.budget else ""
        prompt = (f"[tuner] Round {state.round}: choose the search of the accepted template with run_search. "
                  f"Its parameters: {params}. Configurations measured on it before are not measured again.{cap}")
        return self._turn(state, "tuner", prompt, want="run_search")

    def test(self, state: LoopState, record: RoundRecord) -> Report:
        prompt = ("[tester] The search's results are in the tool result above; here is the engine's summary:\n"
                  f"{round_analysis(state, record)}\nWrite the round's analysis in a few sentences. End with "
                  "one line `NEXT: continue` or `NEXT: stop` (nothing more to gain).")
        text = self._turn(state, "tester", prompt, want=None, record=record)
        return Report(_without_next(text), stop=_next(text) == "stop")

    # prompts -----------------------------------------------------------------------------------
    def _plan_prompt(self, state: LoopState) -> str:
        lines = [f"[planner] Round {state.round} of {state.rounds} on {state.limits.name} ({state.backend}), "
                 f"problem {state.problem.label()}.", sol_line(state)]
        orig = state.original_result
        if orig is not None:
            lines.append(f"The original kernel: {us(orig.median_us)}.")
        for rec in state.history:
            best = (f"best {config_label(rec.best.config)} at {us(rec.best.median_us)}" if rec.best
                    else "no verified result")
            lines.append(f"Round {rec.round}: {len(rec.results)} evaluated, {best}.")
        if state.template is None:
            lines.append("No template yet: this round must propose one.")
        lines.append("Write this round's plan in a few sentences. End with one line: `NEXT: template` (a new "
                     "template), `NEXT: search` (search the current template) or `NEXT: stop`.")
        return "\n".join(lines)

    def _context(self, state: LoopState) -> str:
        o = state.original
        limits = "\n".join(f"{k}: {v}" for k, v in describe(state.limits))
        return (f"The original kernel `{o.name}` (backend in use: {state.backend}).\n\n"
                f"Its spec (kernel.toml):\n```toml\n{o.spec_text}\n```\n\n"
                f"Its {state.backend} source:\n```\n{o.source_for(state.backend)}\n```\n\n"
                f"The device:\n{limits}\n\nThe problem tuned for: {state.problem.label()}. "
                f"{sol_line(state).split(';')[0]}. {sol_table(state)}")

    # the conversation --------------------------------------------------------------------------
    def _turn(self, state: LoopState, role: str, prompt: str, want: str | None,
              rejection: str | None = None, record: RoundRecord | None = None) -> Any:
        if self._system is None:
            self._system = [{"type": "text", "text": SYSTEM},
                            {"type": "text", "text": self._context(state), "cache_control": {"type": "ephemeral"}}]
        content = [ready or self._answer(i, n, state, rejection, record) for i, n, ready in self._pending]
        self._pending = []
        content.append({"type": "text", "text": prompt})
        self.messages.append({"role": "user", "content": content})
        texts: list[str] = []
        for _ in range(self.max_turns):
            message = self._call(state, role, tool_choice={"type": "any"} if want else {"type": "auto"})
            blocks = [_block_param(b) for b in message.content]
            blocks = [b for b in blocks if b is not None]
            self.messages.append({"role": "assistant", "content": blocks or [{"type": "text", "text": "..."}]})
            # everything that leaves this provider is scrubbed of the key, whatever the model says
            texts += [redact(b["text"]) for b in blocks if b["type"] == "text"]
            uses = [b for b in blocks if b["type"] == "tool_use"]
            if not uses:
                if want is None:
                    return "\n".join(texts).strip()
                self.messages.append({"role": "user", "content": [
                    {"type": "text", "text": f"[{role}] Call {want} now."}]})
                continue
            results, found = [], None
            for use in uses:
                name, args = use["name"], use.get("input") or {}
                if found is not None:
                    self._pending.append((use["id"], name, _result(use["id"], "ignored: one tool call per turn "
                                                                   "is acted on")))
                    continue
                args = _scrubbed(args)
                if name in READ_TOOLS:
                    results.append(_result(use["id"], self._read(name, args, state)))
                elif name == "apply_rewrites":
                    results.append(self._apply_rewrites(use["id"], args, state))
                elif name == want:
                    try:
                        found = _parse_proposal(args, state.backend, self._rewritten) \
                            if want == "propose_template" else _parse_search(args, state)
                    except ToolInputError as e:
                        results.append(_result(use["id"], f"invalid input: {e}", error=True))
                        continue
                    self._pending.append((use["id"], name, None))
                else:
                    results.append(_result(use["id"], f"{name} is not for the {role}"
                                           + (f": call {want}" if want else ": answer in text"), error=True))
            if found is not None:
                # the other calls of this message are answered with the next turn
                self._pending = [(r["tool_use_id"], "", r) for r in results] + self._pending
                return found
            self.messages.append({"role": "user", "content": results})
        raise ProviderError(f"claude gave no {want or 'answer'} as {role} in {self.max_turns} turns")

    def _answer(self, tool_id: str, name: str, state: LoopState, rejection: str | None,
                record: RoundRecord | None) -> dict[str, Any]:
        """The result of a tool call left open at the end of the last turn."""
        if name == "propose_template":
            if rejection is not None:
                return _result(tool_id, f"rejected by the gate: {rejection}", error=True)
            v = state.last_verdict
            if v is not None and v.ok:
                return _result(tool_id, "accepted: " + "; ".join(v.checks))
            return _result(tool_id, f"rejected by the gate: {v.reason if v else 'not checked'}", error=True)
        if name == "run_search":
            rec = record or (state.history[-1] if state.history else None)
            if rec is None:
                return _result(tool_id, "the search has not run")
            if rec.error:
                return _result(tool_id, f"the search could not run: {rec.error}", error=True)
            return _result(tool_id, f"round {rec.round} searched ({rec.reason}):\n{results_table(rec.results)}")
        return _result(tool_id, "ignored: one tool call per turn is acted on")

    def _read(self, name: str, args: dict, state: LoopState) -> str:
        if name == "read_kernel":
            out = [f"Original spec:\n{state.original.spec_text}",
                   f"Original {state.backend} source:\n{state.original.source_for(state.backend)}"]
            if state.template is not None:
                out += [f"Accepted template spec:\n{state.template.spec_text}",
                        f"Accepted template source:\n{state.template.source_for(state.backend)}"]
            return "\n\n".join(out)
        if name == "read_device_limits":
            return "\n".join(f"{k}: {v}" for k, v in describe(state.limits))
        if name == "read_profile":
            return profiles_text(state)
        rnd = args.get("round") if isinstance(args, dict) else None
        limit = args.get("limit", 15) if isinstance(args, dict) else 15
        limit = limit if isinstance(limit, int) and not isinstance(limit, bool) and 0 < limit <= 200 else 15
        recs = [r for r in state.history if rnd is None or r.round == rnd]
        if not recs:
            return "no results yet" if rnd is None else f"no round {rnd}"
        return "\n\n".join(f"Round {r.round}:\n{results_table(r.results, limit)}" for r in recs)

    def _apply_rewrites(self, tool_id: str, args: Any, state: LoopState) -> dict[str, Any]:
        """The rules' template made as apply_rewrites asks, kept under a name for from_rewrites, and
        told in full: what was made, what was declined and why, and the template."""
        try:
            ask = _parse_rewrites(args)
            proposal, lines = rewritten(ask, state)
        except ToolInputError as e:
            return _result(tool_id, f"invalid input: {e}", error=True)
        if proposal is None:
            return _result(tool_id, "\n".join(["no template: nothing asked for was made", *lines]))
        name = f"rewrites-{len(self._rewritten) + 1}"
        self._rewritten[name] = proposal
        head = (f"{name}: a template of {len(proposal.parameters)} parameters for {state.backend}, made by the "
                f"rules' code. Propose it with propose_template {{\"from_rewrites\": \"{name}\"}} (fields given "
                "there replace its own), or edit it.")
        return _result(tool_id, "\n".join([head, *lines, *_template_lines(proposal, state.backend)]))

    def _request(self) -> dict[str, Any]:
        messages = [dict(m) for m in self.messages]
        last = dict(messages[-1])
        content = [dict(b) for b in last["content"]]
        content[-1] = {**content[-1], "cache_control": {"type": "ephemeral"}}
        last["content"] = content
        messages[-1] = last
        return {"model": self.model, "max_tokens": self.max_tokens, "system": self._system,
                "tools": TOOLS, "messages": messages}

    def _call(self, state: LoopState, role: str, tool_choice: dict[str, Any]) -> Any:
        """One streamed request, its text spoken line by line, its usage recorded.

        A request that fails before its stream opens has had the SDK's retries already; a stream
        that breaks off midway (an SSE error event, a read timeout), a malformed reply and one past
        the call's deadline are retried here."""
        request = self._request()
        attempt = 0
        while True:
            t0 = time.monotonic()
            line = _Lines(lambda text: state.say(redact(text), role))
            watch = _Deadline(self.call_deadline)
            try:
                message = self._stream(request, tool_choice, line, watch)
            except (*self._errors, BadReply) as e:
                opened = watch.opened or isinstance(e, BadReply)
                line.flush()
                if not opened or attempt >= self.stream_retries or not _retryable(e):
                    raise ProviderError(_describe(e)) from None
                attempt += 1
                delay = min(0.5 * 2 ** attempt, 8.0) * (1 - 0.25 * random.random())
                what = "the reply was unusable" if isinstance(e, BadReply) else "the stream broke off"
                state.say(f"{what} ({_describe(e)}); retrying in {delay:.1f} s", role)
                self._sleep(delay)
                continue
            line.flush()
            usage = message.usage
            cache_write = usage.cache_creation_input_tokens or 0
            cache_read = usage.cache_read_input_tokens or 0
            state.record(AgentCall(
                t=state.now(), agent=self.name, role=role, model=self.model,
                input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                cache_read_tokens=cache_read, cache_write_tokens=cache_write,
                cost_usd=cost_usd(self.model, usage.input_tokens, usage.output_tokens, cache_read, cache_write),
                seconds=round(time.monotonic() - t0, 3), stop_reason=message.stop_reason or ""))
            return message

    def _stream(self, request: dict[str, Any], tool_choice: dict[str, Any], line: "_Lines",
                watch: "_Deadline") -> Any:
        """The streamed reply as the SDK's final message. Everything the SDK does here runs under
        `guard`: what it raises besides its own errors comes from a reply that is not what the
        API sends (BadReply), and past the deadline the stream is closed under it."""
        def guard(step: Callable[[], Any]) -> Any:
            try:
                return step()
            except StopIteration:
                raise
            except Exception as e:
                if watch.expired:
                    raise BadReply(f"no whole reply within the call's deadline of {watch.seconds:g} s") from None
                if isinstance(e, self._errors):
                    raise
                detail = " ".join(str(e).split())[:200]
                raise BadReply(f"a malformed reply ({type(e).__name__}{': ' + detail if detail else ''})") from None

        manager = guard(lambda: self.client.messages.stream(**request, tool_choice=tool_choice))
        stream = guard(manager.__enter__)
        try:
            watch.start(stream.close)
            events = iter(stream)
            while True:
                try:
                    event = guard(lambda: next(events))
                except StopIteration:
                    break
                if watch.expired:
                    raise BadReply(f"no whole reply within the call's deadline of {watch.seconds:g} s")
                if getattr(event, "type", "") == "text":
                    line.add(event.text)
            message = guard(stream.get_final_message)
        finally:
            watch.cancel()
            try:
                manager.__exit__(None, None, None)
            except Exception:  # closing a stream that broke: nothing more to read from it
                pass
        if not isinstance(getattr(message, "content", None), list) or getattr(message, "usage", None) is None:
            raise BadReply("a malformed reply: a message without content or usage")
        return message


class BadReply(Exception):
    """A reply that is not what the Messages API sends (malformed, cut off) or that did not end by
    the call's deadline."""


class _Deadline:
    """A model call's wall-clock deadline: when it passes, the open stream is closed under the
    reader, which then fails at its next read (a keep-alive ping cannot put it off)."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.t0 = time.monotonic()
        self.expired = False
        self.opened = False
        self._timer: threading.Timer | None = None

    def start(self, close: Callable[[], None]) -> None:
        self.opened = True

        def expire() -> None:
            self.expired = True
            try:
                close()
            except Exception:  # the reader sees the stream end either way
                pass

        left = self.seconds - (time.monotonic() - self.t0)
        if left <= 0:
            expire()
            return
        self._timer = threading.Timer(left, expire)
        self._timer.daemon = True
        self._timer.start()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


def _deadline_from_env() -> float:
    raw = os.environ.get(DEADLINE_ENV, "")
    try:
        value = float(raw) if raw else DEFAULT_DEADLINE
    except ValueError:
        raise ProviderError(f"{DEADLINE_ENV} must be a number of seconds, got {raw!r}") from None
    if not 0 < value < float("inf"):
        raise ProviderError(f"{DEADLINE_ENV} must be a positive number of seconds, got {raw!r}")
    return value


class _Lines:
    """Streamed text, spoken a line at a time."""

    def __init__(self, say: Callable[[str], None]):
        self.say = say
        self.buf = ""

    def add(self, text: str) -> None:
        self.buf += text
        while "\n" in self.buf:
            line, self.buf = self.buf.split("\n", 1)
            if line.strip():
                self.say(line.rstrip())

    def flush(self) -> None:
        if self.buf.strip():
            self.say(self.buf.rstrip())
        self.buf = ""


def _transport_errors() -> tuple[type[BaseException], ...]:
    out = []
    for module in ("httpx2", "httpx"):
        try:
            out.append(__import__(module).TransportError)
        except (ImportError, AttributeError):
            pass
    return tuple(out)


def _retryable(e: BaseException) -> bool:
    if not hasattr(e, "status_code"):
        return True  # a timeout or a dropped connection
    status = getattr(e, "status_code", 0) or 0
    body = getattr(e, "body", None)
    kind = body.get("error", {}).get("type", "") if isinstance(body, dict) else ""
    return status in (408, 409, 429) or status >= 500 or kind in ("overloaded_error", "api_error", "rate_limit_error")


def _describe(e: Exception) -> str:
    status = getattr(e, "status_code", None)
    body = getattr(e, "body", None)
    message = ""
    if isinstance(body, dict):
        err = body.get("error")
        message = err.get("message", "") if isinstance(err, dict) else ""
    message = message or str(e)
    head = f"{type(e).__name__}" + (f" {status}" if status else "")
    return redact(f"{head}: {' '.join(message.split())[:300]}")


def _scrubbed(value: Any) -> Any:
    """A tool input with every string in it redacted."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [_scrubbed(v) for v in value]
    if isinstance(value, dict):
        return {k: _scrubbed(v) for k, v in value.items()}
    return value


def _result(tool_id: str, text: str, error: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_id, "content": redact(text)}
    if error:
        out["is_error"] = True
    return out


def _block_param(block: Any) -> dict[str, Any] | None:
    """An SDK content block as the dict a request sends back."""
    kind = getattr(block, "type", "")
    if kind == "text":
        return {"type": "text", "text": block.text} if block.text else None
    if kind == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    return None


def _next(text: str) -> str:
    m = re.findall(r"^\s*`?NEXT:\s*(template|search|stop|continue)`?\s*$", text, re.IGNORECASE | re.MULTILINE)
    return m[-1].lower() if m else ""


def _without_next(text: str) -> str:
    return re.sub(r"^\s*`?NEXT:[^\n]*\n?", "", text, flags=re.IGNORECASE | re.MULTILINE).strip()


# tool inputs -----------------------------------------------------------------------------------

def _number(v: Any) -> bool:
    return isinstance(v, (int, float, bool))


def _expr(v: Any, where: str) -> str:
    if isinstance(v, bool) or not isinstance(v, (str, int)):
        raise ToolInputError(f"{where} must be an expression (a string or an integer)")
    return str(v)


def _parse_proposal(args: Any, backend: str,
                    rewritten: dict[str, TemplateProposal] | None = None) -> TemplateProposal:
    """A propose_template input as a proposal; ToolInputError names what is wrong. With
    `from_rewrites`, the named apply_rewrites result, each field given replacing its own."""
    if not isinstance(args, dict):
        raise ToolInputError("the input must be an object")
    base = None
    if "from_rewrites" in args:
        ref, known = args["from_rewrites"], rewritten or {}
        base = known.get(ref) if isinstance(ref, str) else None
        if base is None:
            raise ToolInputError(f"`from_rewrites` must name an apply_rewrites result "
                                 f"({', '.join(known) if known else 'there is none yet: call apply_rewrites'})")
    source = args.get("source")
    if base is not None and source is None:
        source = base.sources[backend]
    if not isinstance(source, str) or not source.strip():
        raise ToolInputError("`source` must be the whole template source, as a string")
    raw = args.get("parameters")
    params = base.parameters if base is not None and raw is None else _parse_parameters(raw)
    constraints = args.get("constraints", base.constraints if base is not None else [])
    if not isinstance(constraints, (list, tuple)) or not all(isinstance(c, str) for c in constraints):
        raise ToolInputError("`constraints` must be a list of expression strings")
    launch = args.get("launch", {}) or {}
    if not isinstance(launch, dict):
        raise ToolInputError("`launch` must be an object with grid, block and shared_bytes")
    dims = {"grid": base.grid, "block": base.block} if base is not None else {}
    for key in ("grid", "block"):
        if key in launch:
            v = launch[key]
            if not isinstance(v, list) or not 1 <= len(v) <= 3:
                raise ToolInputError(f"`launch.{key}` must be a list of one to three expressions")
            dims[key] = tuple(_expr(x, f"launch.{key}") for x in v)
    shared = _expr(launch["shared_bytes"], "launch.shared_bytes") if "shared_bytes" in launch else \
        (base.shared_bytes if base is not None else None)
    summary = args.get("summary", "")
    summary = summary if isinstance(summary, str) and summary else (base.summary if base is not None else "")
    notes = ()
    if base is not None:
        changed = [k for k in ("source", "parameters", "constraints", "launch") if k in args]
        notes = (*base.notes, f"proposed from the rules' rewrites {args['from_rewrites']}"
                 + (f", its {', '.join(changed)} replaced" if changed else ", as they made it"))
    return TemplateProposal(sources={backend: source}, parameters=tuple(params), constraints=tuple(constraints),
                            grid=dims.get("grid"), block=dims.get("block"), shared_bytes=shared,
                            summary=summary, notes=notes)


def _parse_parameters(raw: Any) -> tuple[ParamProposal, ...]:
    if not isinstance(raw, list) or not raw:
        raise ToolInputError("`parameters` must be a non-empty list of objects with name, values and default")
    params = []
    for i, p in enumerate(raw):
        if not isinstance(p, dict):
            raise ToolInputError(f"parameters[{i}] must be an object with name, values and default")
        name, values, default = p.get("name"), p.get("values"), p.get("default")
        if not isinstance(name, str) or not re.match(r"^[A-Za-z_]\w*$", name):
            raise ToolInputError(f"parameters[{i}].name must be a C identifier")
        if not isinstance(values, list) or not values or not all(_number(v) for v in values):
            raise ToolInputError(f"parameters[{i}] ({name}): `values` must be a non-empty list of numbers")
        if not _number(default):
            raise ToolInputError(f"parameters[{i}] ({name}): `default` must be a number")
        desc = p.get("description", "")
        kind = p.get("kind", "")
        if kind not in ("", *PARAM_KINDS):
            raise ToolInputError(f"parameters[{i}] ({name}): `kind` must be one of {', '.join(PARAM_KINDS)}")
        params.append(ParamProposal(name, tuple(values), default, desc if isinstance(desc, str) else "", kind))
    return tuple(params)


@dataclass(frozen=True)
class RewriteAsk:
    """An apply_rewrites input: the rewrites to make, the source to make them on (None: the
    original's), the lifts to leave out and value lists to put in place of the rules' own."""

    rewrites: tuple[str, ...]
    source: str | None = None
    leave_out: tuple[str, ...] = ()
    values: tuple[tuple[str, tuple], ...] = ()


def _parse_rewrites(args: Any) -> RewriteAsk:
    """An apply_rewrites input as a RewriteAsk; ToolInputError names what is wrong."""
    if not isinstance(args, dict):
        raise ToolInputError("the input must be an object")
    unknown = sorted(set(args) - {"rewrites", "source", "leave_out", "values"})
    if unknown:
        raise ToolInputError(f"unknown field {unknown[0]!r} (the fields: rewrites, source, leave_out, values)")
    names = args.get("rewrites", list(REWRITE_NAMES))
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise ToolInputError(f"`rewrites` must be a non-empty list of names among {', '.join(REWRITE_NAMES)}")
    for n in names:
        if n not in REWRITE_NAMES:
            raise ToolInputError(f"`rewrites` names {n!r}, which is none of {', '.join(REWRITE_NAMES)}")
    for n, before in builds_on().items():
        if n in names and before and before not in names:
            raise ToolInputError(f"{n} builds on {before}: ask for both")
    source = args.get("source")
    if source is not None and (not isinstance(source, str) or not source.strip()):
        raise ToolInputError("`source` must be a whole kernel source, as a string")
    leave = args.get("leave_out", [])
    if not isinstance(leave, list) or not all(isinstance(n, str) for n in leave):
        raise ToolInputError("`leave_out` must be a list of parameter names")
    values = args.get("values", {}) or {}
    if not isinstance(values, dict):
        raise ToolInputError("`values` must be an object mapping parameter names to lists of numbers")
    for k, v in values.items():
        if not isinstance(v, list) or not v or not all(_number(x) for x in v):
            raise ToolInputError(f"`values.{k}` must be a non-empty list of numbers")
    return RewriteAsk(tuple(n for n in REWRITE_NAMES if n in names), source, tuple(dict.fromkeys(leave)),
                      tuple((k, tuple(v)) for k, v in values.items()))


def rewritten(ask: RewriteAsk, state: LoopState) -> tuple[TemplateProposal | None, list[str]]:
    """The rules' template of the original (or of `ask.source`) for the backend in use, made by the
    rules' own code (rules_template) with only the rewrites asked for, and lines saying what was made
    and what was declined and why; ToolInputError for a name that is no lift or parameter of it."""
    backend = state.backend
    original = state.original
    if original.parameters:
        raise ToolInputError(f"{original.name} is already a template with {len(original.parameters)} "
                             "parameters: the rules rewrite only kernels without them")
    source = ask.source if ask.source is not None else original.source_for(backend)
    if ask.source is not None:
        try:
            classify(source, original.entry)
        except (KernelTreeError, ValueError) as e:
            raise ToolInputError(f"`source` cannot be read as the kernel {original.entry}: {e}") from None
    kernel = replace(original, sources={backend: source})
    lift = LIFT in ask.rewrites
    if ask.leave_out and not lift:
        raise ToolInputError("`leave_out` names lifts, and `lift` is not among the rewrites asked for")
    dropped = {n for n in pass_names() if n not in ask.rewrites} | set(ask.leave_out)
    made = rules_template(kernel, backend, state.limits, dropped, lift=lift, left_out=NOT_ASKED)
    applied, lifted = made.applied, made.lifted
    stages = {r.name: r for r in applied.rewrites}
    theirs = {p.name: r.name for r in applied.rewrites for p in r.parameters}
    if ask.leave_out:
        lifts = {lf.name for lf in lift_template(kernel, backend, state.limits).lifts}
        for n in ask.leave_out:
            if n in theirs:
                raise ToolInputError(f"`leave_out` names {n}, a parameter of the {theirs[n]} rewrite, not a lift: "
                                     f"leave the rewrite out of `rewrites`, or keep {n} at its default with `values`")
            if n not in lifts:
                raise ToolInputError(f"`leave_out` names {n}, which is no lift of this source (its lifts: "
                                     f"{', '.join(sorted(lifts)) or 'none'})")
    made_lines, declined = [], []
    if lift:
        got = [n for n in lifted.notes if n.startswith("lifted ")]
        if lifted.proposal is not None:
            made_lines += [f"- lift: {n}" for n in got]
        elif ask.leave_out:
            declined.append(f"- lift: nothing lifted with {', '.join(ask.leave_out)} left out as asked")
        else:
            declined.append(f"- lift: {'; '.join(n.removeprefix('nothing to lift: ') for n in lifted.notes)}")
        if ask.leave_out and lifted.proposal is not None:
            made_lines.append(f"- lift: {', '.join(ask.leave_out)} left out as asked")
    reasons = {d.name: d.reason for d in applied.declined if d.reason != NOT_ASKED}
    before = builds_on()
    for n in ask.rewrites:
        if n == LIFT:
            continue
        if n in stages:
            made_lines.append(f"- {n}: {stages[n].description}")
        elif n in reasons:
            declined.append(f"- {n}: {reasons[n]}")
        else:
            declined.append(f"- {n}: not made: it builds on {before[n]}, which was not made")
    lines = (["made:", *made_lines] if made_lines else []) + (["declined:", *declined] if declined else [])
    other = [n for n in lifted.notes if not n.startswith(("lifted ", "nothing to lift: "))] + applied.notes
    lines += [f"note: {n}" for n in other]
    proposal = made.proposal
    if proposal is None:
        return None, lines
    params = {p.name: p for p in proposal.parameters}
    for k, v in ask.values:
        if k not in params:
            raise ToolInputError(f"`values` names {k!r}, which is no parameter of the template the rewrites make "
                                 f"({', '.join(params)})")
        p = params[k]
        params[k] = replace(p, values=tuple(sorted(set(v) | {p.default})))
        if p.default not in v:
            lines.append(f"note: {k}'s default {p.default} kept among its values (it reproduces the original)")
    first = [f"{n} in {', '.join(str(x) for x in v if x in params[n].values)}"
             for r in applied.rewrites for n, v in r.first.items() if n in params and set(v) & set(params[n].values)]
    if first:
        lines.append("the rules measure first: " + "; ".join(first))
    return replace(proposal, sources={backend: proposal.sources[backend]},
                   parameters=tuple(params.values())), lines


def _template_lines(t: TemplateProposal, backend: str) -> list[str]:
    """A proposal as text for the model: parameters, constraints, launch and source."""
    out = ["parameters:"]
    out += [f"- {p.name} in {list(p.values)} (default {p.default})" + (f" [{p.kind}]" if p.kind else "")
            + f": {p.description}" for p in t.parameters]
    if t.constraints:
        out.append("constraints: " + "; ".join(t.constraints))
    launch = [f"{k} {list(v)}" for k, v in (("grid", t.grid), ("block", t.block)) if v is not None]
    if t.shared_bytes is not None:
        launch.append(f"shared_bytes {t.shared_bytes}")
    out.append("launch: " + ("; ".join(launch) if launch else "the original's"))
    out.append(f"source ({backend}):\n```\n{t.sources[backend]}\n```")
    return out


def _parse_search(args: Any, state: LoopState) -> SearchPlan:
    """A run_search input as a search plan; ToolInputError names what is wrong."""
    if not isinstance(args, dict):
        raise ToolInputError("the input must be an object")
    strategy = args.get("strategy", "grid")
    if strategy not in STRATEGIES:
        raise ToolInputError(f"`strategy` must be one of {', '.join(STRATEGIES)}")
    budget = args.get("budget", 0)
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise ToolInputError("`budget` must be a non-negative integer")
    values = args.get("values", {}) or {}
    if not isinstance(values, dict):
        raise ToolInputError("`values` must be an object mapping parameter names to lists of numbers")
    names = {p.name for p in state.template.parameters} if state.template else set()
    out = {}
    for k, v in values.items():
        if k not in names:
            raise ToolInputError(f"`values` names {k!r}, which is no parameter of the template "
                                 f"({', '.join(sorted(names))})")
        if not isinstance(v, list) or not v or not all(_number(x) for x in v):
            raise ToolInputError(f"`values.{k}` must be a non-empty list of numbers")
        out[k] = tuple(v)
    reason = args.get("reason", "")
    return SearchPlan(strategy, budget, out, reason if isinstance(reason, str) else "")


def profiles_text(state: LoopState) -> str:
    """The loop's profiles as text for the model: one block per profiled configuration."""
    from kerntune.engine.ncu import ProfileMetrics
    from kerntune.engine.profile import consistency

    out = []
    for rec in state.history:
        for p in rec.profiles:
            head = f"Round {rec.round}, #{p.rank} {config_label(p.config)} ({p.measured_us:.2f} us timed)"
            if not p.ok:
                out.append(f"{head}: not profiled: {p.message}")
                continue
            out.append(f"{head}:\n  {ProfileMetrics.from_dict(p.metrics).summary()}\n  {consistency(p)}")
    return "\n".join(out) if out else ("no profiles: run with --profile-top K on a CUDA device with Nsight "
                                        "Compute to get them")
