"""txdilation: a fast, durable, drop-in implementation of magic-wormhole's Dilation protocol.

``txdilation.install()`` makes every wormhole created afterwards by stock
``wormhole.create(..., dilation=True)`` dilate through txdilation; ``uninstall()`` restores
stock. Applications see what stock shows them (:data:`STOCK` semantics) unless they choose
:data:`TWISTED` (``install(semantics=...)`` or ``txdilation.dilate(w, semantics=...)``). See
docs/architecture.md for the layers.
"""

from __future__ import annotations

from txdilation._api import dilate
from txdilation._install import install, is_installed, uninstall
from txdilation.semantics import STOCK, TWISTED, Semantics

__version__ = "0.1.0.dev0"

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
