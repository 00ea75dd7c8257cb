"""The environment that arms txdilation in a child process, and the variables that carry it.

Layer: application (``wrap``), imports only the standard library. A process started with
:func:`child_environment` finds :data:`SITE_DIR` first on ``PYTHONPATH``; Python imports its
``sitecustomize`` at start-up, which arms :mod:`txdilation.wrap.startup` when
:data:`DROPIN_VAR` is ``1`` and then runs the ``sitecustomize`` it shadows, if any.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (this starts fast)
if TYPE_CHECKING:
    from collections.abc import Mapping

#: the directory whose ``sitecustomize.py`` arms txdilation in every Python process
SITE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_dropin_site")

DROPIN_VAR = "TXDILATION_DROPIN"
"""``1``: the ``sitecustomize`` in :data:`SITE_DIR` arms txdilation; ``0``: nothing arms it in
this process, not even ``txdilation enable``'s ``.pth``."""

PROOF_VAR = "TXDILATION_DROPIN_PROOF"
"""A file each armed process appends its :mod:`~txdilation.wrap.proof` line to."""

EVENTS_VAR = "TXDILATION_EVENTS"
"""Telemetry's JSON-lines file (``txdilation.settings``)."""

SEMANTICS_VAR = "TXDILATION_SEMANTICS"
"""``stock`` or ``twisted`` (``txdilation.semantics``)."""


def child_environment(
    environ: Mapping[str, str] | None = None,
    *,
    proof: str | None = None,
    events: str | None = None,
    semantics: str | None = None,
) -> dict[str, str]:
    """``environ`` (default ``os.environ``) plus what arms txdilation in a child Python process:
    ``TXDILATION_DROPIN=1`` and :data:`SITE_DIR` first on ``PYTHONPATH`` (once); the files
    given become absolute paths, so that a child that changes directory still finds them."""
    env = dict(os.environ if environ is None else environ)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != SITE_DIR]
    env["PYTHONPATH"] = os.pathsep.join([SITE_DIR, *paths])
    env[DROPIN_VAR] = "1"
    if proof is not None:
        env[PROOF_VAR] = os.path.abspath(proof)
    if events is not None:
        env[EVENTS_VAR] = os.path.abspath(events)
    if semantics is not None:
        env[SEMANTICS_VAR] = semantics
    return env
