"""The line a process writes about itself: did txdilation take effect here?

Layer: application (``wrap``). :func:`record` is one JSON object: the process (``pid``,
``ppid``, ``argv``, ``executable``), what armed txdilation (``armed_by``: ``sitecustomize`` for
``txdilation exec``, ``pth`` for ``txdilation enable``, ``pytest`` for the plugin), whether it
took effect (``took_effect``, with a ``reason`` when not), the ``implementation`` stock's names
resolve to, and the ``versions`` of txdilation, magic-wormhole, Twisted and Python.
:func:`append` adds it to a file as one line (one ``write`` to a file opened for appending:
the lines of concurrent processes do not mix).
"""

from __future__ import annotations

import json
import os
import platform
import sys
from typing import Any

from txdilation._version import IMPLEMENTATION, __version__

#: the module stock's ``wormhole._dilation.manager`` is while txdilation is installed
_STOCK_FACING = "txdilation._stock.manager"


def substitution_report() -> dict[str, Any]:
    """Whether this process dilates through txdilation: installed, and stock's modules and
    the names stock bound at import time resolve to txdilation's."""
    from txdilation._install import is_installed

    report: dict[str, Any] = {"installed": is_installed()}
    manager = sys.modules.get("wormhole._dilation.manager")
    boss = sys.modules.get("wormhole._boss")
    report["dilation_module"] = getattr(manager, "__name__", None)
    dilator = getattr(boss, "Dilator", None)
    report["boss_dilator"] = f"{dilator.__module__}.{dilator.__qualname__}" if dilator else None
    report["substituted"] = bool(
        report["installed"]
        and report["dilation_module"] == _STOCK_FACING
        and report["boss_dilator"] == f"{_STOCK_FACING}.Dilator"
    )
    return report


def versions() -> dict[str, str | None]:
    """txdilation's, magic-wormhole's, Twisted's and Python's versions (None: not installed)."""
    from importlib import metadata

    def installed(distribution: str) -> str | None:
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            return None

    return {
        IMPLEMENTATION: __version__,
        "magic-wormhole": installed("magic-wormhole"),
        "twisted": installed("twisted"),
        "python": platform.python_version(),
    }


def record(armed_by: str, reason: str | None = None) -> dict[str, Any]:
    """This process's line: took effect when stock's names resolve to txdilation's; otherwise
    ``reason`` says why (default: they do not)."""
    report = substitution_report()
    line: dict[str, Any] = {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "argv": sys.argv,
        "executable": sys.executable,
        "armed_by": armed_by,
        "took_effect": report["substituted"],
        "implementation": IMPLEMENTATION if report["substituted"] else None,
        "versions": versions(),
    }
    if "wormhole" in sys.modules and not report["substituted"]:
        line["implementation"] = "magic-wormhole"
    if not report["substituted"]:
        line["reason"] = reason or "stock's dilation names do not resolve to txdilation's"
    line.update(report)
    return line


def append(path: str, line: dict[str, Any]) -> None:
    """Append ``line`` to ``path`` as one JSON line."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")
