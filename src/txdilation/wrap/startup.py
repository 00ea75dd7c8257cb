"""The start-up hook: txdilation takes over when a process first imports ``wormhole``.

Layer: application (``wrap``), the process edge of the drop-in. :func:`arm` runs while Python
starts (from the ``sitecustomize`` of ``txdilation exec`` or the ``.pth`` of ``txdilation
enable``) and only puts :class:`FirstWormholeImport` first on ``sys.meta_path``: a process that
never imports ``wormhole`` loads nothing more. The first ``import wormhole`` runs
``txdilation.install()``, which imports stock's package with txdilation's Dilation in it, and
hands the importer that very module.

Invariants: arming twice is arming once; ``TXDILATION_DROPIN=0`` arms nothing; a failure to
install leaves the process on stock (one line on stderr says why, and the proof line too);
with ``TXDILATION_DROPIN_PROOF=PATH`` the process appends exactly one line to PATH
(:mod:`txdilation.wrap.proof`): when ``wormhole`` is first imported, or at exit if it never is.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import ModuleSpec

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at every start-up
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any

_armed: list[str] = []  # what armed this process ("sitecustomize", "pth", "pytest"), once
_proved: list[bool] = []


def arm(armed_by: str) -> None:
    """Arm txdilation in this process (see the module docstring); ``armed_by`` is what did."""
    if _armed or os.environ.get("TXDILATION_DROPIN") == "0":
        return
    _armed.append(armed_by)
    if os.environ.get("TXDILATION_DROPIN_PROOF"):
        import atexit

        atexit.register(_prove_at_exit)
    if "wormhole" in sys.modules:  # imported before we were armed: rebind its names now
        _prove(_install())
    else:
        sys.meta_path.insert(0, FirstWormholeImport())


class FirstWormholeImport:
    """A ``sys.meta_path`` finder that answers only the first import of ``wormhole``: with
    stock's own module, imported after ``txdilation.install()``."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        if fullname != "wormhole":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        for finder in sys.meta_path:  # not installed here: let the import fail as it would
            find = getattr(finder, "find_spec", None)
            if find is not None and find(fullname, path, target) is not None:
                return ModuleSpec(fullname, _InstallThenImport())  # type: ignore[arg-type]
        return None


class _InstallThenImport:
    """The loader of that one import: the module is the one ``install()`` imported."""

    _own_spec: ModuleSpec | None = None

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        failure = _install()
        import importlib

        module = importlib.import_module("wormhole")  # done by install(), or stock's on failure
        self._own_spec = module.__spec__
        _prove(failure)
        return module

    def exec_module(self, module: ModuleType) -> None:
        # importlib stamped our spec on stock's module: give it back its own
        module.__spec__ = self._own_spec


def _install() -> str | None:
    """``txdilation.install()``; on failure, back to stock: says why (stderr), returns why."""
    reason = None
    try:
        from txdilation._install import install

        install()
    except Exception as e:  # stay on stock, and say so
        reason = f"txdilation could not be installed: {type(e).__name__}: {e}"
        sys.stderr.write(f"txdilation: not in effect in this process; {reason}\n")
        from txdilation._install import uninstall

        uninstall()
    return reason


def _prove(reason: str | None) -> None:
    """Append this process's proof line (once), if asked for."""
    path = os.environ.get("TXDILATION_DROPIN_PROOF")
    if not path or _proved:
        return
    _proved.append(True)
    from txdilation.wrap.proof import append, record

    try:
        append(path, record(_armed[0] if _armed else "unknown", reason))
    except OSError as e:
        sys.stderr.write(f"txdilation: cannot write the proof line to {path}: {e}\n")


def _prove_at_exit() -> None:
    _prove("this process never imported wormhole: there was no Dilation to replace")
