"""
Reliability figures: what the fault-injection, hostile-input, fuzzing and memory tests proved,
collected into one JSON file and rendered as the table in docs/reliability.md.

Layer: test infrastructure. A test calls :func:`record` with its own id, the pairing it ran
and its figures; nothing is written unless ``TXDILATION_FIGURES`` names the JSON file, so an
ordinary test run changes no file. Records are keyed by test id, so running the suite again
(under pytest and then under trial) replaces a test's record instead of adding to it.

File format (``benchmarks/figures/reliability-figures.json``)::

    {"records": {"<test id>": {"pairing": "<pairing key>", "figures": {"<figure>": number}}}}

Figures are summed over tests per pairing, except maxima (``is_max_figure``: those in
``MAX_FIGURES``, names with ``peak`` or starting with ``worst_``), where the largest value
wins. Pairing keys are those of ``PAIRINGS``; a figure that is not about a pairing uses
``"all"``. ``tests/support/render_figures.py`` turns the file into the table.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

FIGURES_ENV = "TXDILATION_FIGURES"

# pairing key -> column heading
PAIRINGS: dict[str, str] = {
    "txdilation-leads-stock": "txdilation Leader, stock Follower",
    "stock-leads-txdilation": "stock Leader, txdilation Follower",
    "txdilation-txdilation": "txdilation, txdilation",
    "all": "txdilation (any peer)",
}

# figure key -> row heading, in table order; other keys follow, under their own names
FIGURES: dict[str, str] = {
    "scenarios_run": "fault scenarios passed",
    "cuts_survived": "link cuts survived (connections reset with RST)",
    "connections_cut": "connections reset by those cuts",
    "black_holes_survived": "black-holed links left for a new generation",
    "mailbox_restarts_survived": "mailbox server restarts survived mid-transfer",
    "bytes_verified": "bytes delivered and verified by SHA-256",
    "worst_dead_link_detection_intervals": "slowest dead-link detection (ping intervals)",
    "hostile_connections_handled": "hostile connections handled",
    "fuzz_cases_run": "fuzz cases run",
    "peak_memory_mib": "peak memory (MiB)",
    "fuzz_hypothesis_examples": "Hypothesis examples behind the fuzz cases",
    "fuzz_seconds": "seconds spent fuzzing",
    "memory_test_sender_peak_mib": "memory test: sender peak (MiB)",
    "memory_test_receiver_peak_mib": "memory test: receiver peak (MiB)",
    "memory_test_seconds": "memory test: seconds for 1 GiB to a slow reader",
}

MAX_FIGURES = {"worst_dead_link_detection_intervals", "peak_memory_mib"}


def is_max_figure(figure: str) -> bool:
    """True for figures combined by taking the largest value instead of summing."""
    return figure in MAX_FIGURES or "peak" in figure or figure.startswith("worst_")


def figures_path(environ: Mapping[str, str] | None = None) -> Path | None:
    """The JSON file named by ``TXDILATION_FIGURES``, or None when figures are not wanted."""
    value = (os.environ if environ is None else environ).get(FIGURES_ENV, "").strip()
    return Path(value) if value else None


def load(path: Path) -> dict[str, Any]:
    """The figures file's content (an empty record set if it does not exist yet).

    :raises ValueError: if the file is not a figures file.
    """
    if not path.exists():
        return {"records": {}}
    data = json.loads(path.read_text() or "{}")
    if not isinstance(data, dict) or not isinstance(data.setdefault("records", {}), dict):
        raise ValueError(f"{path} is not a figures file")
    return data


def record(test_id: str, pairing: str, path: Path | None = None, **figures: float) -> None:
    """
    Store ``figures`` for ``test_id`` (replacing that test's earlier record).

    :param test_id: the test's id (``self.id()``).
    :param pairing: a key of ``PAIRINGS``.
    :param path: the JSON file; default ``figures_path()`` (nothing happens if that is None).
    :param figures: figure key -> number.
    :raises ValueError: for an unknown pairing.
    """
    if pairing not in PAIRINGS:
        raise ValueError(f"unknown pairing {pairing!r}")
    path = path or figures_path()
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    with open(Path(tempfile.gettempdir()) / f"txdilation-figures-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = load(path)
        data["records"][test_id] = {"pairing": pairing, "figures": dict(figures)}
        data["records"] = dict(sorted(data["records"].items()))
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        tmp.replace(path)


def aggregate(data: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """
    Combine the records: figure -> pairing -> value (summed, or the maximum for
    ``MAX_FIGURES``). A pairing without any record for a figure is absent.
    """
    table: dict[str, dict[str, float]] = {}
    for entry in data.get("records", {}).values():
        pairing = entry["pairing"]
        for figure, value in entry["figures"].items():
            row = table.setdefault(figure, {})
            if is_max_figure(figure):
                row[pairing] = max(row.get(pairing, value), value)
            else:
                row[pairing] = row.get(pairing, 0) + value
    return table
