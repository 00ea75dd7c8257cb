"""The ``txdilation`` console command.

``txdilation run [options]``: one long-running dilated session in the foreground, forwarding
named services; the same options as ``twistd dilation`` (see docs/command.md), plus a live
status line. ``txdilation run --help`` lists them.

``txdilation demo``: start a real mailbox server and transit relay on 127.0.0.1, dilate two
wormholes through them (txdilation on both sides), stream data over a subchannel while cutting
the L2 link a few times, verify the SHA-256 at the receiver, and print a summary table. No
internet is used; the command exits 0 only if every byte arrived once, in order.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for ``txdilation``."""
    parser = argparse.ArgumentParser(prog="txdilation", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser(
        "run",
        help="run one dilated session in the foreground (txdilation run --help)",
        add_help=False,
    )
    demo = sub.add_parser("demo", help="dilate two local wormholes and move data, cutting the link")
    demo.add_argument("--mib", type=int, default=64, help="MiB to send (default 64)")
    demo.add_argument("--cuts", type=int, default=3, help="times to cut the link (default 3)")
    demo.add_argument("--relay-only", action="store_true", help="no direct connections")
    demo.add_argument("--timeout", type=float, default=120.0, help="give up after this long")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``txdilation`` command; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["run"]:
        from .session.foreground import run

        return run(argv[1:])
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        from .demo import run_demo

        return run_demo(
            mib=args.mib, cuts=args.cuts, relay_only=args.relay_only, timeout=args.timeout
        )
    return 2  # pragma: no cover (argparse rejects unknown commands)


if __name__ == "__main__":
    sys.exit(main())
