"""``txdilation exec [OPTIONS] [--] COMMAND [ARGS...]``: run COMMAND on txdilation.

Layer: application (``wrap``). The environment gets what arms txdilation in every Python
process (:func:`txdilation.wrap.environment.child_environment`), then this process becomes
COMMAND (``os.execvpe``): its stdin, stdout, stderr, signals and exit status are COMMAND's by
construction, and the only cost is this process's start. Nothing heavy is imported here
(no Twisted, no ``wormhole``).

Errors are one line on stderr: a usage mistake or an invalid ``TXDILATION_*`` setting exits 2,
a COMMAND that is not found 127 and one that cannot be run 126 (the shell's conventions).
"""

from __future__ import annotations

import os
import signal
import sys

from txdilation.errors import UsageMistake
from txdilation.wrap.environment import child_environment

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (this starts fast)
if TYPE_CHECKING:
    from collections.abc import Sequence

PROG = "txdilation exec"
EXIT_USAGE = 2
EXIT_CANNOT_RUN = 126
EXIT_NOT_FOUND = 127

USAGE = f"usage: {PROG} [--semantics NAME] [--events FILE] [--proof FILE] [--] COMMAND [ARGS...]"

HELP = f"""{USAGE}

Run COMMAND so that txdilation replaces magic-wormhole's Dilation in it and in every Python
process it starts (a console script such as fowl, fowld, git-withme or wormhole, or
'python prog.py'). COMMAND's stdin, stdout, stderr, signals and exit status are its own.
The TXDILATION_* variables of the environment reach every process (docs/api.md,
"Operator settings").

options:
  -h, --help        show this help and exit
  --semantics NAME  what applications see where stock's behaviour is a defect: stock (the
                    default) or twisted (TXDILATION_SEMANTICS)
  --events FILE     append every dilation's telemetry to FILE as JSON lines
                    (TXDILATION_EVENTS)
  --proof FILE      every Python process appends one JSON line to FILE saying whether
                    txdilation took effect in it, with the implementation and versions

exit status: COMMAND's; 2 for a usage error, 126 when COMMAND cannot be run, 127 when it is
not found. See docs/dropin.md.
"""

_OPTIONS = ("--semantics", "--events", "--proof")

#: what Python ignores at start-up and a command must not inherit (as ``subprocess`` restores)
_RESTORED_SIGNALS = ("SIGPIPE", "SIGXFZ", "SIGXFSZ")


class UsageError(UsageMistake):
    """A mistake on the command line or in a ``TXDILATION_*`` variable: one line."""


def parse(argv: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """The options (``semantics``, ``events``, ``proof``; ``help`` for ``-h``) and the command
    with its arguments.

    :raises UsageError: for an unknown option, an option without its value, or no command.
    """
    options: dict[str, str] = {}
    rest = list(argv)
    while rest and rest[0].startswith("-"):
        word = rest.pop(0)
        if word == "--":
            break
        if word in ("-h", "--help"):
            return {"help": "yes"}, []
        name, equals, value = word.partition("=")
        if name not in _OPTIONS:
            raise UsageError(f"unknown option {word!r} (the command goes after the options)")
        if not equals:
            if not rest:
                raise UsageError(f"{name} needs a value")
            value = rest.pop(0)
        if not value:
            raise UsageError(f"{name} needs a value")
        options[name[2:]] = value
    if not rest:
        raise UsageError("no command given")
    return options, rest


def check_settings(environ: dict[str, str]) -> None:
    """Refuse an invalid ``TXDILATION_*`` setting now, with one line, rather than in the
    application's ``dilate()`` later.

    :raises UsageError: naming the variable.
    """
    if not any(k.startswith("TXDILATION_") and k not in _OURS for k in environ):
        return  # nothing to read: keep the common case free of imports
    from txdilation.settings import Settings

    try:
        Settings.from_environ(environ)
    except ValueError as e:
        raise UsageError(str(e)) from None


_OURS = frozenset({"TXDILATION_DROPIN", "TXDILATION_DROPIN_PROOF"})


def main(argv: Sequence[str]) -> int:
    """``txdilation exec ARGV``: becomes the command, or returns an exit status (an error)."""
    try:
        options, command = parse(argv)
        if "help" in options:
            sys.stdout.write(HELP)
            return 0
        env = child_environment(
            proof=options.get("proof"),
            events=options.get("events"),
            semantics=options.get("semantics"),
        )
        check_settings(env)
    except UsageError as e:
        sys.stderr.write(f"{PROG}: error: {e}; see '{PROG} --help'\n")
        return EXIT_USAGE
    return become(command, env)


def become(command: list[str], env: dict[str, str]) -> int:
    """Replace this process with ``command``; returns only if it cannot be run (126, 127)."""
    for name in _RESTORED_SIGNALS:
        number = getattr(signal, name, None)
        if number is not None:
            signal.signal(number, signal.SIG_DFL)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(command[0], command, env)
    except OSError as e:  # as a shell says it: 127 for a command not found, else 126
        found = not isinstance(e, FileNotFoundError)
        status = EXIT_CANNOT_RUN if found else EXIT_NOT_FOUND
        why = e.strerror if found or "/" in command[0] else "command not found"
    sys.stderr.write(f"{PROG}: {command[0]}: {why}\n")
    return status
