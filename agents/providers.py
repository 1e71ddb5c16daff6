"""Which providers a run uses: `claude` on the Anthropic SDK, `rules` offline.

`providers()` picks them for the command line: the first leads, the rest take over in order when
one fails, so a run that starts with Claude finishes with the rules if the API goes away.
"""


from __future__ import annotations

import os
from typing import Mapping

from kerntune.engine.agent_api import Provider, ProviderError

AGENTS = ("claude", "rules")


class AgentUnavailable(ValueError):
    """An agent asked for by name that cannot run here (no API key, no SDK); one line."""


def providers(agent: str | None, model: str | None = None,
              env: Mapping[str, str] = os.environ) -> tuple[list[Provider], str]:
    """The providers for `--agent` (None: Claude when ANTHROPIC_API_KEY is set, else the rules),
    and a sentence saying which and why."""
    from .claude import DEFAULT_MODEL, KEY_ENV, MODEL_ENV, ClaudeProvider
    from .rules import RulesProvider

    if agent not in (None, *AGENTS):
        raise AgentUnavailable(f"unknown agent {agent!r} (known: {', '.join(AGENTS)})")
    if agent == "rules":
        return [RulesProvider()], "agent: rules (offline, deterministic)"
    has_key = bool(env.get(KEY_ENV))
    if agent is None and not has_key:
        return [RulesProvider()], f"agent: rules ({KEY_ENV} is not set; with it, Claude plans)"
    chosen = model or env.get(MODEL_ENV) or DEFAULT_MODEL
    try:
        claude = ClaudeProvider(chosen)
    except ProviderError as e:
        if agent == "claude":
            raise AgentUnavailable(f"--agent claude: {e}") from None
        return [RulesProvider()], f"agent: rules (Claude cannot run: {e})"
    why = "asked for with --agent claude" if agent == "claude" else f"{KEY_ENV} is set"
    return [claude, RulesProvider()], (f"agent: claude, model {chosen} ({why}); the rules take over if "
                                       "the API fails")
