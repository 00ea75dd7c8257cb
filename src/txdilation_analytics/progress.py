"""Progress lines on stderr: what the pipeline is doing, how many rows, how long it took."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO


class Progress:
    """One line per step on a stream (stderr by default): what, how many rows, how long."""

    def __init__(self, stream: TextIO | None = None, quiet: bool = False) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._quiet = quiet
        self._t0 = time.monotonic()

    def say(self, message: str) -> None:
        """Print one progress line prefixed with the elapsed time."""
        if not self._quiet:
            print(f"[{time.monotonic() - self._t0:7.1f}s] {message}", file=self._stream)
            self._stream.flush()

    @contextmanager
    def step(self, what: str) -> Iterator[dict[str, Any]]:
        """Time a step; the caller may set ``info["rows"]`` to have it printed."""
        info: dict[str, Any] = {}
        start = time.monotonic()
        self.say(f"{what} ...")
        yield info
        rows = f", {info['rows']:,} rows" if "rows" in info else ""
        self.say(f"{what}: done in {time.monotonic() - start:.1f}s{rows}")


__all__ = ["Progress"]
