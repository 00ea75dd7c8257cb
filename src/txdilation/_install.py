"""Make stock magic-wormhole dilate through txdilation.

:func:`install` puts a ``sys.meta_path`` finder in front that answers imports of
``wormhole._dilation`` and ``wormhole._dilation.<name>`` with the ``txdilation._stock`` package
and its modules (the same module objects: nothing is loaded twice). If ``wormhole`` was
imported before, the names stock bound at import time (``wormhole._boss.Dilator``,
``wormhole.wormhole.DILATION_VERSIONS``/``Connector``, ``wormhole.SubchannelAddress``) are
rebound too. :func:`uninstall` restores every module and name exactly as it found them.

Invariant: between ``install()`` and ``uninstall()``, ``sys.modules["wormhole._dilation.X"] is
sys.modules["txdilation._stock.X"]`` for every submodule that was imported.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Any

from txdilation.semantics import Semantics, semantics_named, set_default

_STOCK = "wormhole._dilation"
_OURS = "txdilation._stock"

# (module name, attribute) -> replacement source "module:attr" in txdilation
_BOUND_NAMES = [
    ("wormhole._boss", "Dilator", "txdilation._stock.manager", "Dilator"),
    ("wormhole.wormhole", "DILATION_VERSIONS", "txdilation._stock.manager", "DILATION_VERSIONS"),
    ("wormhole.wormhole", "Connector", "txdilation._stock.connector", "Connector"),
    ("wormhole", "SubchannelAddress", "txdilation._stock.subchannel", "SubchannelAddress"),
]


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.target)
        self._own_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # importlib stamped the alias spec on the shared module; give it back its own, so
        # that importlib.resources, pickling and reloads keep seeing txdilation.
        module.__spec__ = self._own_spec


class _DilationFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == _STOCK or fullname.startswith(_STOCK + "."):
            ours = _OURS + fullname[len(_STOCK) :]
            is_package = fullname == _STOCK
            return importlib.machinery.ModuleSpec(
                fullname, _AliasLoader(ours), is_package=is_package
            )
        return None


_finder: _DilationFinder | None = None
_saved_modules: dict[str, ModuleType] = {}
_saved_names: dict[tuple[str, str], Any] = {}
_saved_parent_attr: list[Any] = []


def is_installed() -> bool:
    """True between install() and uninstall()."""
    return _finder is not None


def install(semantics: Semantics | str | None = None) -> None:
    """Route stock magic-wormhole's dilation through txdilation (idempotent).

    :param semantics: what applications see where stock's behaviour is a defect whose fix
        could break them: :data:`txdilation.semantics.STOCK` (stock's behaviour, the default
        unless ``TXDILATION_SEMANTICS`` says otherwise), :data:`~txdilation.semantics.TWISTED`,
        their names, or a :class:`~txdilation.semantics.Semantics` of your own. Given on a
        repeated call, it replaces the earlier choice.
    :raises ValueError: for an unknown name.
    """
    global _finder
    if semantics is not None:
        set_default(semantics_named(semantics) if isinstance(semantics, str) else semantics)
    if _finder is not None:
        return
    _finder = _DilationFinder()
    sys.meta_path.insert(0, _finder)
    for name in [n for n in sys.modules if n == _STOCK or n.startswith(_STOCK + ".")]:
        _saved_modules[name] = sys.modules.pop(name)
    wormhole = sys.modules.get("wormhole")
    if wormhole is None:
        # Import stock's package now, through the finder, so that its own imports of
        # wormhole._dilation.* bind txdilation's before anything else imports them.
        importlib.import_module("wormhole")
    else:
        _saved_parent_attr.append(wormhole.__dict__.get("_dilation"))
        wormhole._dilation = importlib.import_module(_STOCK)  # type: ignore[attr-defined]
        # the stock submodules that had been imported are ours now too (the same names, so
        # that `import wormhole._dilation.manager` anywhere later finds txdilation's)
        for name in sorted(_saved_modules):
            if name != _STOCK:
                importlib.import_module(name)
    for module_name, attr, source, source_attr in _BOUND_NAMES:
        module = sys.modules.get(module_name)
        if module is not None and hasattr(module, attr):
            _saved_names[(module_name, attr)] = getattr(module, attr)
            setattr(module, attr, getattr(importlib.import_module(source), source_attr))


def uninstall() -> None:
    """Undo install(): stock modules and names come back, and the semantics chosen with
    ``install(semantics=)`` is forgotten (idempotent)."""
    global _finder
    if _finder is None:
        return
    set_default(None)
    sys.meta_path.remove(_finder)
    _finder = None
    for name in [n for n in sys.modules if n == _STOCK or n.startswith(_STOCK + ".")]:
        del sys.modules[name]
    sys.modules.update(_saved_modules)
    _saved_modules.clear()
    wormhole = sys.modules.get("wormhole")
    if wormhole is not None and _saved_parent_attr:
        previous = _saved_parent_attr.pop()
        if previous is None:
            wormhole.__dict__.pop("_dilation", None)
        else:
            wormhole._dilation = previous  # type: ignore[attr-defined]
    for (module_name, attr), value in _saved_names.items():
        module = sys.modules.get(module_name)
        if module is not None:
            setattr(module, attr, value)
    _saved_names.clear()
