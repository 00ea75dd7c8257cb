"""A pytest plugin that runs a test session with txdilation standing in for stock dilation.

``python -m pytest -p txdilation.dropin --pyargs wormhole.test.dilate.test_full`` runs
magic-wormhole's own dilation tests against txdilation. The plugin installs txdilation when
pytest configures it (before test modules are collected, so before they import ``wormhole``),
restricts our listener and hints to loopback unless the environment says otherwise, reports
the substitution in the header, and uninstalls at the end. Importing this module does nothing.
"""

from __future__ import annotations

import os
from typing import Any

from ._install import install, is_installed, uninstall


def pytest_configure(config: Any) -> None:
    """Install txdilation for this pytest session (loopback unless configured otherwise)."""
    os.environ.setdefault("TXDILATION_LISTEN_INTERFACE", "127.0.0.1")
    os.environ.setdefault("TXDILATION_HINT_ADDRESSES", "127.0.0.1")
    install()


def pytest_unconfigure(config: Any) -> None:
    """Restore stock dilation when the session ends."""
    uninstall()


def pytest_report_header(config: Any) -> str:
    """Say in the pytest header that wormhole._dilation is txdilation."""
    import wormhole._dilation as dilation

    return (
        f"txdilation.dropin: wormhole._dilation -> {dilation.__name__} (installed={is_installed()})"
    )
