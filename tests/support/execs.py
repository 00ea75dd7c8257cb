"""Running ``txdilation`` commands in tests, and reading the proof lines they leave.

Layer: test infrastructure. :func:`txdilation_command` is the ``txdilation`` console script of
this environment (beside ``sys.executable``), or ``python -m txdilation`` where there is none;
:func:`proof_lines` reads a ``--proof`` file.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def txdilation_command() -> list[str]:
    """The argv prefix that runs ``txdilation`` here."""
    script = os.path.join(os.path.dirname(sys.executable), "txdilation")
    if os.access(script, os.X_OK):
        return [script]
    return [sys.executable, "-m", "txdilation"]


def exec_prefix(proof: str | None = None, *options: str) -> list[str]:
    """``txdilation exec [--proof PROOF] OPTIONS... --``: put it before a command."""
    prefix = [*txdilation_command(), "exec"]
    if proof is not None:
        prefix += ["--proof", proof]
    return [*prefix, *options, "--"]


def proof_lines(path: str) -> list[dict[str, Any]]:
    """The JSON lines of a proof file (none if it does not exist)."""
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
