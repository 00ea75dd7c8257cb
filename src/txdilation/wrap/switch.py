"""``txdilation enable`` / ``txdilation disable``: txdilation in every process of one
environment, or in none.

Layer: application (``wrap``). ``enable`` writes :data:`PTH_NAME` into the running
environment's site-packages (``sysconfig``'s ``purelib``: a virtualenv's, a pipx
application's, or the interpreter's own): Python runs its one line in every process it starts
there, and that line arms :mod:`txdilation.wrap.startup` (coverage.py's convention for measuring
subprocesses). ``disable`` removes that file and nothing else, so the environment is exactly as
before ``enable``. Both are idempotent; an environment that cannot be written is one line on
stderr and exit status 1.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from typing import TextIO

PTH_NAME = "txdilation-dropin.pth"

#: the ``.pth`` line: arms txdilation, and does nothing once txdilation is uninstalled
PTH_LINE = (
    'import sys; exec("try:\\n from txdilation.wrap.startup import arm\\n'
    "except ImportError:\\n arm = None\\nif arm:\\n arm('pth')\")\n"
)


def pth_path() -> str:
    """Where ``enable`` puts its file: this interpreter's site-packages."""
    return os.path.join(sysconfig.get_paths()["purelib"], PTH_NAME)


def is_enabled() -> bool:
    """Whether this environment has txdilation's ``.pth``."""
    return os.path.exists(pth_path())


def enable(out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Write the ``.pth`` (again, if it was changed); 0, or 1 if it cannot be written."""
    path = pth_path()
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(PTH_LINE)
    except OSError as e:
        err.write(f"txdilation enable: cannot write {path}: {e.strerror or e}\n")
        return 1
    out.write(
        f"txdilation enabled for {sys.prefix}: every Python process there dilates through "
        f"txdilation ({path}; 'txdilation disable' undoes it)\n"
    )
    return 0


def disable(out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Remove the ``.pth``; 0 (also when it was not there), or 1 if it cannot be removed."""
    path = pth_path()
    try:
        os.remove(path)
    except FileNotFoundError:
        out.write(f"txdilation was not enabled for {sys.prefix}: nothing to do\n")
        return 0
    except OSError as e:
        err.write(f"txdilation disable: cannot remove {path}: {e.strerror or e}\n")
        return 1
    out.write(f"txdilation disabled for {sys.prefix}: stock magic-wormhole's Dilation again\n")
    return 0
