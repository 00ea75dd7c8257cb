"""txdilation: a fast, durable, drop-in implementation of magic-wormhole's Dilation protocol.

``txdilation.install()`` makes every wormhole created afterwards by stock
``wormhole.create(..., dilation=True)`` dilate through txdilation; ``uninstall()`` restores
stock. Applications see what stock shows them (:data:`STOCK` semantics) unless they choose
:data:`TWISTED` (``install(semantics=...)`` or ``txdilation.dilate(w, semantics=...)``). See
docs/architecture.md for the layers.

The names below are imported on first use, so that ``import txdilation`` costs next to nothing:
every Python process under ``txdilation exec`` (or with ``txdilation enable``) imports it at
start-up (docs/dropin.md).
"""

from __future__ import annotations

from txdilation._version import __version__

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from typing import Any

    from txdilation._api import dilate
    from txdilation._install import install, is_installed, uninstall
    from txdilation.semantics import STOCK, TWISTED, Semantics

_LAZY = {
    "dilate": "txdilation._api",
    "install": "txdilation._install",
    "is_installed": "txdilation._install",
    "uninstall": "txdilation._install",
    "STOCK": "txdilation.semantics",
    "TWISTED": "txdilation.semantics",
    "Semantics": "txdilation.semantics",
}


def __getattr__(name: str) -> Any:
    """Import one of the public names on first use (see the module docstring)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'txdilation' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "STOCK",
    "TWISTED",
    "Semantics",
    "__version__",
    "dilate",
    "install",
    "is_installed",
    "uninstall",
]
