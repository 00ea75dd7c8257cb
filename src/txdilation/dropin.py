"""txdilation standing in for stock dilation in a whole test session, child processes included.

``python -m pytest -p txdilation.dropin --pyargs wormhole.test.dilate.test_full`` runs
magic-wormhole's own dilation tests against txdilation; ``-p txdilation.dropin --pyargs
fowl.test`` runs fowl's. The plugin installs txdilation when pytest configures it (before test
modules are collected, so before they import ``wormhole``), restricts our listener and hints to
loopback unless the environment says otherwise, and makes every Python process the tests start
install txdilation too (:func:`child_environment`: a ``sitecustomize`` on ``PYTHONPATH``). It
reports the substitution in the header, and uninstalls at the end. Importing this module does
nothing.

With ``TXDILATION_DROPIN_PROOF=PATH`` in the environment, every process (the test process and
each child) appends a JSON line to PATH with :func:`substitution_report`: proof that the
substitution took effect there.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from typing import Any

from txdilation._install import install, is_installed, uninstall

#: the directory whose ``sitecustomize.py`` installs txdilation in child processes
SITE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_dropin_site")


def child_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default ``os.environ``) plus what makes a child Python process install
    txdilation at start-up: ``TXDILATION_DROPIN=1`` and :data:`SITE_DIR` first on
    ``PYTHONPATH``."""
    env = dict(os.environ if environ is None else environ)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != SITE_DIR]
    env["PYTHONPATH"] = os.pathsep.join([SITE_DIR, *paths])
    env["TXDILATION_DROPIN"] = "1"
    return env


#: the module stock's ``wormhole._dilation.manager`` is while txdilation is installed
_STOCK_FACING = "txdilation._stock.manager"


def substitution_report() -> dict[str, Any]:
    """Whether this process dilates through txdilation: installed, and stock's modules and
    the names stock bound at import time resolve to txdilation's."""
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


def pytest_configure(config: Any) -> None:
    """Install txdilation for this pytest session and its children (loopback unless
    configured otherwise)."""
    os.environ.setdefault("TXDILATION_LISTEN_INTERFACE", "127.0.0.1")
    os.environ.setdefault("TXDILATION_HINT_ADDRESSES", "127.0.0.1")
    os.environ.update(child_environment())
    install()
    proof = os.environ.get("TXDILATION_DROPIN_PROOF")
    if proof:
        line = {"pid": os.getpid(), "argv": sys.argv, **substitution_report()}
        with open(proof, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")


def pytest_unconfigure(config: Any) -> None:
    """Restore stock dilation when the session ends."""
    uninstall()


def pytest_report_header(config: Any) -> str:
    """Say in the pytest header that wormhole._dilation is txdilation."""
    import wormhole._dilation as dilation

    return (
        f"txdilation.dropin: wormhole._dilation -> {dilation.__name__} (installed={is_installed()})"
        f"; child processes install it too ({SITE_DIR} on PYTHONPATH)"
    )
