"""txdilation's name and version: the one place the version is set (``setup.cfg`` reads it).

Imports nothing, so that the start-up hook (``txdilation.wrap.startup``) and the lean commands
can name the implementation without loading Twisted.
"""

from __future__ import annotations

IMPLEMENTATION = "txdilation"
"""The name an application sees for this Dilation implementation (status, log, telemetry)."""

__version__ = "0.2.0"
