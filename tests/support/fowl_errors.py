"""A pytest plugin for fowl's own suite as tests/test_fowl.py runs it (``-p
tests.support.fowl_errors``): every ``error`` message a fowld process sends to fowl's tests is
printed with its text.

fowl's test_iperf3 reads fowld's messages in a fixed order and fails on the first unexpected
one with only its class (``'WormholeError' object has no attribute 'local_port'``); fowld's
stderr is not kept. The text (which service failed, and why) is what tells an ordering race of
fowl's from a fault of the Dilation underneath, so the harness needs it in the output.

Loaded as a plugin, before fowl's test modules are imported, it wraps
``fowl._proto.parse_fowld_output`` (which they import by name) in ``pytest_configure``; the
message itself is returned unchanged. Importing the module changes nothing.
"""

from __future__ import annotations

from typing import Any

import fowl._proto
from fowl.messages import WormholeError

_parse_fowld_output = fowl._proto.parse_fowld_output

#: what each printed line starts with (tests/test_fowl.py looks for it)
PREFIX = "fowld reported an error:"


def parse_fowld_output_showing_errors(json_str: str) -> Any:
    """``parse_fowld_output``, printing the text of an ``error`` message."""
    parsed = _parse_fowld_output(json_str)
    message = parsed[0] if isinstance(parsed, tuple) else parsed
    if isinstance(message, WormholeError):
        print(f"{PREFIX} {message.message}", flush=True)
    return parsed


def pytest_configure(config: Any) -> None:
    """Wrap fowl's parser (pytest calls this once the plugin is registered)."""
    fowl._proto.parse_fowld_output = parse_fowld_output_showing_errors
