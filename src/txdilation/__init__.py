"""txdilation: a fast, durable, drop-in implementation of magic-wormhole's Dilation protocol.

``txdilation.install()`` makes every wormhole created afterwards by stock
``wormhole.create(..., dilation=True)`` dilate through txdilation; ``uninstall()`` restores
stock. See docs/architecture.md for the layers.
"""

from __future__ import annotations

from ._install import install, is_installed, uninstall

__version__ = "0.1.0.dev0"

__all__ = ["__version__", "install", "is_installed", "uninstall"]
