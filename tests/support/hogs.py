"""CPU hogs for starvation tests: busy-looping child processes a test starts and stops.

Layer: test infrastructure. Each hog is ``python -c`` spinning until its own deadline, so a
test runner that dies without cleaning up cannot leave one behind for longer than
``lifetime`` seconds.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

SPIN = "import time\nend = time.monotonic() + {lifetime}\nwhile time.monotonic() < end: pass\n"


def start_hogs(count: int, lifetime: float) -> Callable[[], None]:
    """Start ``count`` busy-looping processes (each ends by itself after ``lifetime``
    seconds); returns the function that stops them all and waits for them."""
    hogs = [
        subprocess.Popen([sys.executable, "-c", SPIN.format(lifetime=float(lifetime))])
        for _ in range(count)
    ]

    def stop() -> None:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait()

    return stop
