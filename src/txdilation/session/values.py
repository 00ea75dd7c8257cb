"""Checks of single setting values a person types: a wormhole code, a listen interface, a size.

Layer: configuration (pure: text in, a checked value or a ``ValueError`` out; no I/O). Each
check is as strict as what would fail later, and says in one line what was expected, so that a
mistake is caught while the options are parsed, before anything starts (``txdilation run``,
``twistd dilation``, ``dilation:`` endpoint strings share them). Importing this module does not
import ``wormhole``.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Final

__all__ = ["check_code", "is_wildcard", "listen_address", "parse_size"]

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
_UNITS: Final = {
    "": 1,
    "B": 1,
    "k": 1000,
    "K": 1000,
    "M": 10**6,
    "G": 10**9,
    "KI": 2**10,
    "MI": 2**20,
    "GI": 2**30,
}


def parse_size(text: str | int) -> int:
    """A byte count: an int, or digits with an optional unit (``64MiB``, ``4M``, ``512k``,
    ``16MB``; ``k``/``M``/``G`` are powers of 1000, ``KiB``/``MiB``/``GiB`` powers of 1024).
    A lower-case ``b`` (``16Mb``, ``512kb``) is refused: it usually means bits.

    :raises ValueError: for anything else, saying what was meant to be written.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    raw = str(text).strip()
    found = _SIZE.fullmatch(raw)
    if found is None:
        raise ValueError(f"expected a number of bytes such as 65536 or 64MiB, not {text!r}")
    number, unit = int(found.group(1)), found.group(2)
    if unit.endswith("b"):
        prefix = unit[:-1]
        raise ValueError(
            f"{raw!r} is ambiguous: a lower-case b means bits; write {number}{prefix.upper()}B "
            f"(powers of 1000) or {number}{prefix.upper()}iB (powers of 1024) for bytes"
            if prefix
            else f"{raw!r} is ambiguous: a lower-case b means bits; write {number} or {number}B "
            "for bytes"
        )
    key = unit.removesuffix("B")
    key = key if key in ("", "k", "K", "M", "G") else key.upper()
    if key not in _UNITS:
        raise ValueError(f"expected a number of bytes such as 65536 or 64MiB, not {text!r}")
    return number * _UNITS[key]
