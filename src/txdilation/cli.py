"""The ``txdilation`` console command (docs/command.md; ``python -m txdilation`` is the same).

``txdilation run``: one long-running dilated session in the foreground, with ``twistd
dilation``'s options and a live status line; ``txdilation demo``: two wormholes through a local
mailbox server and transit relay, the link cut a few times, every byte verified, no internet;
``txdilation pairing show|forget PATH`` (docs/pairing.md, never the secret); ``txdilation
exec|enable|disable|which``: an application you already run, on txdilation
(:mod:`txdilation.wrap`, docs/dropin.md).

Invariants: every command takes ``-h``/``--help`` and ``-V``/``--version`` (txdilation,
magic-wormhole, Twisted and Python); a usage error is ONE line on stderr saying where to look
(``... see 'txdilation demo --help'``), exit status 2; an unreadable pairing file is one line,
exit status 1.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from txdilation import _early_signals
from txdilation.values import parse_seconds
from txdilation.wrap import commands as wrap_commands


class _Version(argparse.Action):
    """``--version``: print :func:`version_text` as it is (one version per line), exit 0."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the versions and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        from txdilation.session.command_line import version_text

        print(version_text())
        parser.exit(0)


class _Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (no usage text first) and exit status 2."""

    def error(self, message: str) -> NoReturn:
        from txdilation.session.foreground import EXIT_USAGE, usage_error

        self.exit(EXIT_USAGE, usage_error(self.prog, message) + "\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for ``txdilation``."""
    parser = _Parser(
        prog="txdilation",
        description="One long-running dilated magic-wormhole forwarding named services (run), "
        "a demonstration on this machine (demo), or a pairing kept from one (pairing).",
    )
    parser.add_argument("-V", "--version", action=_Version)
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="{run,demo,pairing,exec,enable,disable,which}"
    )
    sub.add_parser(
        "run",
        help="run one dilated session in the foreground (txdilation run --help)",
        add_help=False,
    )
    demo = sub.add_parser(
        "demo",
        help="dilate two local wormholes and move data, cutting the link",
        description="Two local txdilation sessions forward a service through a real mailbox "
        "server and transit relay on 127.0.0.1; the link is cut while data flows; every byte "
        "is verified (see docs/command.md).",
    )
    demo.add_argument("-V", "--version", action=_Version)
    demo.add_argument("--mib", type=_positive, default=64, help="MiB to send (default 64)")
    demo.add_argument(
        "--cuts", type=_not_negative, default=3, help="times to cut the link (default 3)"
    )
    demo.add_argument("--relay-only", action="store_true", help="no direct connections")
    demo.add_argument(
        "--timeout", type=_seconds, default=120.0, help="give up after this many seconds (120)"
    )
    pairing = sub.add_parser(
        "pairing",
        help="show or forget a pairing file (txdilation pairing --help)",
        description="Pairing files (docs/pairing.md): 'show' prints one, never its secret; "
        "'forget' removes it (the peer's side must be forgotten too).",
    )
    pairing.add_argument("-V", "--version", action=_Version)
    actions = pairing.add_subparsers(dest="action", required=True, metavar="{show,forget}")
    for action, text in (("show", "print a pairing"), ("forget", "remove a pairing file")):
        sub_action = actions.add_parser(action, help=text, description=text)
        sub_action.add_argument("-V", "--version", action=_Version)
        sub_action.add_argument("path", metavar="PATH", help="the pairing file")
    wrap_commands.add_parsers(sub)
    return parser


def _seconds(text: str) -> float:
    try:
        return parse_seconds(text)
    except ValueError:
        problem = f"expected a positive number of seconds, not {text!r}"
        raise argparse.ArgumentTypeError(problem) from None


def _positive(text: str) -> int:
    return _integer(text, 1)


def _not_negative(text: str) -> int:
    return _integer(text, 0)


def _integer(text: str, lowest: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = lowest - 1
    if value < lowest:
        wanted = "a positive whole number" if lowest > 0 else "a whole number, 0 or more"
        raise argparse.ArgumentTypeError(f"expected {wanted}, not {text!r}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``txdilation`` command; returns the exit status (141, as for
    SIGPIPE, when stdout's reader left early: ``txdilation run --help | head``)."""
    try:
        return _main(argv)
    except BrokenPipeError:  # the reader is gone: nothing more to say, and no traceback
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + 13


def _main(argv: Sequence[str] | None) -> int:
    from_console = argv is None  # (not a test calling main(): the process is ours)
    argv = list(sys.argv[1:] if argv is None else argv)
    if from_console and argv[:1] in (["run"], ["demo"]):
        _early_signals.install(f"txdilation {argv[0]}")  # before the slow imports
    if argv[:1] and argv[0] in wrap_commands.NAMES:
        return wrap_commands.run(argv)
    if argv[:1] == ["run"]:
        from txdilation.session.foreground import run

        return run(argv[1:])
    args = build_parser().parse_args(argv)
    if args.command == "pairing":
        from txdilation.pairing.show import forget, show

        command = show if args.action == "show" else forget
        return command(args.path, sys.stdout, sys.stderr)
    if args.command == "demo":
        from txdilation.demo import run_demo

        return run_demo(
            mib=args.mib, cuts=args.cuts, relay_only=args.relay_only, timeout=args.timeout
        )
    return 2  # pragma: no cover (argparse rejects unknown commands)


if __name__ == "__main__":
    sys.exit(main())
