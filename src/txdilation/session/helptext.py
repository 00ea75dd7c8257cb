"""The help of a session's options in argparse's format, as every ``txdilation`` command has it.

Layer: presentation of the command line (no I/O). ``txdilation run`` and ``twistd dilation``
parse their options with ``twisted.python.usage`` (twistd requires it), whose help has another
format than the argparse commands (``txdilation demo``, ``pairing``, ``txdilation-analytics``).
:func:`help_parser` mirrors a ``usage.Options`` as an ``argparse.ArgumentParser`` that is never
used to parse: its ``format_help()`` is what ``--help`` prints (a ``usage:`` line, the
description, then every option with ``-h``/``--help`` first), and the documentation's command
line reference is generated from it.

Invariant: every option the ``usage.Options`` takes is listed, with its short form and its
text; a value's name (``URL``, ``S``, ``SIZE``, ...) comes from :data:`METAVARS` or, for the
Dilation settings, from their kind (``VALUE`` for one not known here).
"""

from __future__ import annotations

import argparse
from typing import Any, Final

__all__ = ["METAVARS", "help_parser"]

METAVARS: Final = {
    "mailbox": "URL",
    "appid": "APPID",
    "code": "CODE",
    "pairing": "PATH",
    "ping-interval": "S",
    "status": "PATH",
    "events": "PATH",
    "config": "FILE",
    "drain-timeout": "S",
    "close-timeout": "S",
    "log-level": "LEVEL",
    "listen": "NAME=SERVER_ENDPOINT",
    "connect": "NAME=CLIENT_ENDPOINT",
    "relay": "LOCATION",
}
"""The name of each session option's value in the help."""

_KIND_METAVARS: Final = {
    "address": "ADDR",
    "addresses": "A,B",
    "port": "N",
    "port-or-0": "N",
    "switch": "on|off",
    "seconds": "S",
    "seconds-or-0": "S",
    "bytes": "SIZE",
}


def help_parser(options: Any, prog: str) -> argparse.ArgumentParser:
    """An argparse parser listing the options of ``options`` (a ``usage.Options`` instance),
    for its help only (see the module docstring).

    :param prog: the command as a person types it (``txdilation run``).
    """
    from txdilation.session.config import DILATION_SETTINGS

    metavars = {
        **METAVARS,
        **{d.key: _KIND_METAVARS.get(d.kind, "VALUE") for d in DILATION_SETTINGS},
    }
    parser = argparse.ArgumentParser(
        prog=prog,
        usage="%(prog)s [options]",
        description=getattr(options, "longdesc", None),
        add_help=False,
    )
    shorts = {
        long: short for short, long in options.synonyms.items() if len(short) == 1 and short != long
    }
    parser.add_argument("-h", "--help", action="help", help="show this help message and exit")
    names = sorted(name.rstrip("=") for name in options.longOpt)
    for name in sorted(names, key=lambda n: n != "version"):  # --version first, as argparse's
        if name == "help":
            continue
        flags = [f"-{shorts[name]}", f"--{name}"] if name in shorts else [f"--{name}"]
        text = (options.docs.get(name) or "").replace("%", "%%")
        if f"{name}=" in options.longOpt:
            parser.add_argument(*flags, metavar=metavars.get(name, "VALUE"), help=text)
        else:
            parser.add_argument(*flags, action="store_true", help=text)
    return parser
