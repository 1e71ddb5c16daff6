"""The command line's errors: which exceptions end a command as one line, with which exit status.

Bad input (an argument, a template, a session, a campaign file) exits 2, a run that could not go
on (no backend, a run that failed) exits 1, an interrupt 130; anything else is a bug and keeps
its traceback. UsageError lives here, in a module of its own, so that every command module raises
the class `main()` catches, also when the command line runs as `python -m kerntune.tui.cli` (where
cli.py is `__main__`).
"""

from __future__ import annotations

import sys

from kerntune.tui.terminal import printable

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130


class UsageError(ValueError):
    """A bad command-line argument."""


# By module and class name: a command imports only what it uses, and an error of a module that
# was never imported cannot have been raised, so these are looked up only in loaded modules.
BAD_INPUT = (
    "kerntune.engine.template:TemplateError",
    "kerntune.engine.session:SessionError",
    "kerntune.engine.expressions:ExpressionError",
    "kerntune.engine.space:SpaceError",
    "kerntune.engine.simulate:SimulationError",
    "kerntune.engine.kerneltuner:CacheFormatError",
    "kerntune.engine.campaign:CampaignError",
    "kerntune.engine.summary:CampaignError",
)
FAILED = (
    "kerntune.engine.backends:BackendError",
    "kerntune.engine.tune:TuneError",
)


def _loaded(names: tuple[str, ...]) -> tuple[type, ...]:
    found = []
    for name in names:
        module, _, cls = name.partition(":")
        if module in sys.modules:
            found.append(getattr(sys.modules[module], cls))
    return tuple(found)


def one_line(e: BaseException) -> tuple[int, str] | None:
    """The exit status and the line (empty: nothing to say) for an error a command ends with;
    None for an error that is a bug, whose traceback the user should see."""
    if isinstance(e, UsageError) or isinstance(e, _loaded(BAD_INPUT)):
        return EXIT_BAD_INPUT, str(e)
    if isinstance(e, _loaded(FAILED)):
        return EXIT_FAILED, str(e)
    if isinstance(e, KeyboardInterrupt):
        return EXIT_INTERRUPTED, str(e) or "interrupted"  # a signal's cut says which
    if isinstance(e, BrokenPipeError):  # the reader went away (`| head`): nothing to tell it
        return EXIT_FAILED, ""
    if isinstance(e, OSError):
        return EXIT_FAILED, f"{getattr(e, 'filename', '') or ''}: {e.strerror or e}".lstrip(": ")
    return None


def print_error(text: object) -> None:
    """`kerntune: error: ...` on stderr, on one line whatever the text holds."""
    print(f"kerntune: error: {printable(' '.join(str(text).split()))}", file=sys.stderr)
