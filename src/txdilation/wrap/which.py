"""``txdilation which``: which Dilation this environment runs, and the versions.

Layer: application (``wrap``). It asks this very process, which Python started as it starts
any other process of the environment: ``wormhole`` is imported (the ``.pth`` of ``txdilation
enable`` or ``txdilation exec``'s ``sitecustomize`` takes over if armed) and stock's names are
checked (:func:`txdilation.wrap.proof.substitution_report`). The switch's state and the
versions of txdilation, magic-wormhole, Twisted and Python follow, one per line.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

from txdilation._version import IMPLEMENTATION, __version__
from txdilation.wrap.environment import DROPIN_VAR
from txdilation.wrap.proof import substitution_report, versions
from txdilation.wrap.switch import is_enabled, pth_path


def which(out: TextIO = sys.stdout) -> int:
    """Print the report (see the module docstring); exit status 0."""
    import wormhole  # noqa: F401  (as any application would: armed hooks take over here)

    found = versions()
    if substitution_report()["substituted"]:
        dilation = f"{IMPLEMENTATION} {__version__}"
    else:
        dilation = f"stock magic-wormhole {found['magic-wormhole']}"
    if is_enabled():
        switch = f"on ({pth_path()}; 'txdilation disable' turns it off)"
    else:
        switch = "off ('txdilation enable' turns it on for every process of this environment)"
    under_exec = "yes" if os.environ.get(DROPIN_VAR) == "1" else "no"
    lines = [
        f"dilation: {dilation}",
        f"switch: {switch}",
        f"under txdilation exec: {under_exec}",
        f"txdilation {found[IMPLEMENTATION]}",
        f"magic-wormhole {found['magic-wormhole'] or 'not installed'}",
        f"Twisted {found['twisted'] or 'not installed'}",
        f"Python {found['python']} ({sys.executable})",
    ]
    out.write("\n".join(lines) + "\n")
    return 0
