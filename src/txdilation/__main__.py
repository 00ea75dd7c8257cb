"""The ``txdilation`` command (console script and ``python -m txdilation``).

``exec``, ``enable``, ``disable`` and ``which`` (:mod:`txdilation.wrap.commands`) run without
loading the rest of the CLI, so that ``txdilation exec`` costs one lean Python start;
everything else is :mod:`txdilation.cli`.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:
    from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``txdilation`` command; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    from txdilation.wrap.commands import NAMES

    if args[:1] and args[0] in NAMES:
        from txdilation.wrap.commands import run

        return run(args)
    from txdilation.cli import main as cli_main

    return cli_main(argv)  # (None from the console: the CLI knows the process is its own)


if __name__ == "__main__":
    sys.exit(main())
