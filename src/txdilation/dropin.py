"""txdilation standing in for stock dilation in a whole test session, child processes included.

``python -m pytest -p txdilation.dropin --pyargs wormhole.test.dilate.test_full`` runs
magic-wormhole's own dilation tests against txdilation (``--pyargs fowl.test``: fowl's). The
plugin installs txdilation when pytest configures it (before test modules import
``wormhole``), restricts our listener and hints to loopback unless the environment says
otherwise, makes every Python process the tests start install txdilation too
(:func:`child_environment`: a ``sitecustomize`` on ``PYTHONPATH``), reports the substitution
in the header, and uninstalls at the end. Importing this module does nothing.

With ``TXDILATION_DROPIN_PROOF=PATH``, every process appends a JSON line to PATH
(:func:`txdilation.wrap.proof.record`): proof that the substitution took effect there.
``txdilation exec`` (``txdilation.wrap``) is the same for any command.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from txdilation._install import install, is_installed, uninstall
from txdilation.wrap import environment
from txdilation.wrap.proof import append, record, substitution_report

#: the directory whose ``sitecustomize.py`` installs txdilation in child processes
SITE_DIR = environment.SITE_DIR

__all__ = ["SITE_DIR", "child_environment", "substitution_report"]


def child_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default ``os.environ``) plus what makes a child Python process install
    txdilation (``txdilation.wrap.environment.child_environment``): ``TXDILATION_DROPIN=1`` and
    :data:`SITE_DIR` first on ``PYTHONPATH``."""
    return environment.child_environment(environ)


def pytest_configure(config: Any) -> None:
    """Install txdilation for this pytest session and its children (loopback unless
    configured otherwise)."""
    os.environ.setdefault("TXDILATION_LISTEN_INTERFACE", "127.0.0.1")
    os.environ.setdefault("TXDILATION_HINT_ADDRESSES", "127.0.0.1")
    os.environ.update(child_environment())
    install()
    proof = os.environ.get(environment.PROOF_VAR)
    if proof:
        append(proof, record("pytest"))


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
