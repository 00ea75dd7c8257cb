"""The one parser of each kind of setting value: seconds, sizes, switches, ports, codes, addresses.

Layer: values, below everything but ``txdilation.errors`` (pure: text in, a checked value or a
``ValueError`` out; no I/O, no other txdilation import). Every reader of a setting uses these:
``txdilation.settings`` (``TXDILATION_*`` variables), the session's options and TOML file,
``dilation:`` endpoint strings, the ``txdilation`` command. Each check is as strict as what
would fail later and says in one line what was expected (:class:`BadValue`); a caller names the
value's source (``--option``, key or variable) around it. ``tests/test_quality.py`` keeps these
parsers the only ones.
"""

from __future__ import annotations

import ipaddress
import math
import re
from typing import Final

from txdilation.errors import UsageMistake

__all__ = [
    "BadValue",
    "check_code",
    "is_wildcard",
    "listen_address",
    "parse_port",
    "parse_seconds",
    "parse_size",
    "parse_switch",
]


class BadValue(ValueError, UsageMistake):
    """Not what was :attr:`expected`: ``expected X, not 'T'``, or ``NAME must be X, not 'T'``."""

    def __init__(self, expected: str, text: object) -> None:
        super().__init__(f"expected {expected}, not {text!r}")
        self.expected, self.text = expected, text

    def named(self, name: str) -> str:
        return f"{name} must be {self.expected}, not {self.text!r}"


def parse_seconds(text: str | float, *, zero: bool = False) -> float:
    """A duration in seconds: a finite number, positive (0 too when ``zero``), else BadValue."""
    try:
        seconds = float(text)
    except ValueError:
        raise BadValue("a number of seconds", text) from None
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not zero):
        raise BadValue(f"a {'non-negative' if zero else 'positive'} number of seconds", text)
    return seconds


_ON: Final = frozenset({"1", "on", "yes", "true"})
_OFF: Final = frozenset({"0", "off", "no", "false"})


def parse_switch(text: str | bool) -> bool:
    """On (``1``/``on``/``yes``/``true``) or off (``0``/``off``/``no``/``false``), else BadValue."""
    if isinstance(text, bool):
        return text
    word = text.strip().lower()
    if word in _ON or word in _OFF:
        return word in _ON
    raise BadValue("on or off", text)


def parse_port(text: str | int, *, zero: bool = False) -> int:
    """A TCP port number, 1 to 65535 (0 too when ``zero``: the system chooses), else BadValue."""
    lowest = 0 if zero else 1
    try:
        port = -1 if isinstance(text, bool) else int(text)
    except ValueError:
        port = -1
    if not lowest <= port <= 65535:
        raise BadValue(f"a port number ({lowest} to 65535)", text)
    return port


_CODE: Final = re.compile(r"\d+-\S+")
CODE_EXAMPLE: Final = "7-guitarist-revenge"


def check_code(code: str) -> str:
    """A wormhole code: the nameplate (digits), a dash, then the words, without spaces (what
    stock's ``set_code`` accepts, and at least one word).

    :raises ValueError: naming the code and what a code looks like.
    """
    if not _CODE.fullmatch(code):
        raise ValueError(
            f"{code!r} is not a wormhole code: a code looks like {CODE_EXAMPLE} (a number, a "
            "dash, then words, no spaces)"
        )
    return code


def listen_address(text: str) -> str:
    """The IP address a listener binds: an IPv4 or IPv6 address (``0.0.0.0`` or ``::`` for
    all of this host's), in its normal form.

    :raises ValueError: for a host name or anything else that is not an address.
    """
    try:
        return str(ipaddress.ip_address(text.strip().strip("[]")))
    except ValueError:
        raise ValueError(
            f"expected an IP address of this host such as 127.0.0.1 or ::1 (0.0.0.0 or :: for "
            f"all), not {text!r}"
        ) from None


def is_wildcard(address: str) -> bool:
    """``0.0.0.0`` or ``::``: every address of this host."""
    return ipaddress.ip_address(address).is_unspecified


_SIZE: Final = re.compile(r"(\d+)\s*([A-Za-z]*)")
_UNITS: Final = {"": 1, "k": 1000, "K": 1000, "M": 10**6, "G": 10**9}
_UNITS.update({"KI": 2**10, "MI": 2**20, "GI": 2**30})


def parse_size(text: str | int) -> int:
    """A byte count: an int, or digits with an optional unit (``64MiB``, ``4M``, ``512k``,
    ``16MB``; ``k``/``M``/``G`` are powers of 1000, ``KiB``/``MiB``/``GiB`` powers of 1024).
    A lower-case ``b`` (``16Mb``, ``512kb``) is refused: it usually means bits.

    :raises ValueError: for anything else, saying what was meant to be written
        (:class:`BadValue` unless it is a lower-case ``b``).
    """
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    raw = str(text).strip()
    found = _SIZE.fullmatch(raw)
    if found is None:
        raise BadValue("a number of bytes such as 65536 or 64MiB", text)
    number, unit = int(found.group(1)), found.group(2)
    if unit.endswith("b"):
        p = unit[:-1].upper()
        way = f"{number}{p}B (powers of 1000) or {number}{p}iB (powers of 1024)"
        way = way if p else f"{number} or {number}B"
        raise ValueError(f"{raw!r} is ambiguous: a lower-case b means bits; write {way} for bytes")
    key = unit.removesuffix("B")
    key = key if key in ("", "k", "K", "M", "G") else key.upper()
    if key not in _UNITS:
        raise BadValue("a number of bytes such as 65536 or 64MiB", text)
    return number * _UNITS[key]
