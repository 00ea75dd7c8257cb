"""The ``txdilation`` commands of :mod:`txdilation.wrap`: ``exec``, ``enable``, ``disable``,
``which``.

Layer: application (``wrap``). :func:`run` runs one (the ``txdilation`` console script calls it
first, without loading the rest of the CLI: ``exec`` must start fast); :func:`add_parsers`
lists them in ``txdilation --help``. Usage errors are one line and exit status 2.
"""

from __future__ import annotations

import sys

from txdilation.wrap.exec_command import EXIT_USAGE

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (``exec`` starts fast)
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

HELP = {
    "exec": "run a command with txdilation in every Python process it starts "
    "(txdilation exec --help)",
    "enable": "use txdilation in every process of this environment (a .pth file)",
    "disable": "undo 'txdilation enable': stock magic-wormhole's Dilation again",
    "which": "say whether this environment dilates through stock or txdilation, and the versions",
}

NAMES = tuple(HELP)


def add_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """List the commands in ``txdilation --help`` (:func:`run` parses their arguments)."""
    for name, text in HELP.items():
        sub.add_parser(name, help=text, add_help=False)


def run(argv: Sequence[str]) -> int:
    """``txdilation NAME ARGS...`` for NAME in :data:`NAMES`; 141, as for SIGPIPE, when
    stdout's reader left early (``txdilation which | head -1``)."""
    try:
        return _run(argv[0], list(argv[1:]))
    except BrokenPipeError:  # the reader is gone: nothing more to say, and no traceback
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + 13


def _run(name: str, rest: list[str]) -> int:
    if name == "exec":
        from txdilation.wrap.exec_command import main

        return main(rest)
    if rest in (["-h"], ["--help"]):
        sys.stdout.write(f"usage: txdilation {name}\n\n{HELP[name]} (docs/dropin.md)\n")
        return 0
    if rest:
        sys.stderr.write(
            f"txdilation {name}: error: unexpected argument {rest[0]!r}; "
            f"see 'txdilation {name} --help'\n"
        )
        return EXIT_USAGE
    if name == "which":
        from txdilation.wrap.which import which

        return which()
    from txdilation.wrap.switch import disable, enable

    return enable() if name == "enable" else disable()
