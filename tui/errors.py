"""The command line's own error: a bad argument, printed as one line (exit status 2).

A module of its own so that every command module raises the class `main()` catches, also when
the command line runs as `python -m kerntune.tui.cli` (where cli.py is `__main__`)."""


class UsageError(ValueError):
    """A bad command-line argument."""
