"""pytest plugin: the release and per-Python tiers run in the background of the session.

Layer: test infrastructure (registered by tests/conftest.py). When the session selected tests
of ``tests/test_tiers.py``, they move to the end, and ``tests.support.tiers.BACKGROUND`` starts
as collection ends (at low priority), so that its minutes overlap the rest of the suite; those
tests then collect its results. An interrupted session ends the run. Without pytest (trial),
the tests start it themselves.
"""

from __future__ import annotations

from typing import Any

from tests.support.tiers import BACKGROUND

TIERS_MODULE = "tests.test_tiers"


def pytest_collection_modifyitems(session: Any, config: Any, items: list[Any]) -> None:
    """Move the tiers' tests to the end and start the tiers, if any were selected."""
    tiers = [
        i for i in items if getattr(getattr(i, "module", None), "__name__", "") == TIERS_MODULE
    ]
    if not tiers:
        return
    items[:] = [i for i in items if i not in tiers] + tiers
    if not config.getoption("collectonly", False):
        BACKGROUND.start()


def pytest_unconfigure(config: Any) -> None:
    """End a run the session did not wait for, and remove its files."""
    BACKGROUND.remove()
