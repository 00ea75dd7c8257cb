"""Install txdilation in every Python process that has this directory on ``PYTHONPATH``.

Python imports ``sitecustomize`` at start-up. ``txdilation.dropin`` (the pytest plugin) and
``txdilation.dropin.child_environment()`` put this directory first on ``PYTHONPATH`` and set
``TXDILATION_DROPIN=1``, so that every child process (a ``fowld`` a test spawns, say) dilates
through txdilation too, not only the test process. With ``TXDILATION_DROPIN_PROOF=PATH`` each
process appends one JSON line to PATH saying whether the substitution took effect in it.
Afterwards the next ``sitecustomize`` on ``sys.path`` (the one this file shadows, if any) runs.

This directory is not a package: nothing here is imported as ``txdilation.<name>``.
"""

from __future__ import annotations


def _install_and_prove() -> None:
    import json
    import os
    import sys

    if os.environ.get("TXDILATION_DROPIN") != "1":
        return
    import txdilation
    from txdilation.dropin import substitution_report

    txdilation.install()
    proof = os.environ.get("TXDILATION_DROPIN_PROOF")
    if proof:
        line = json.dumps({"pid": os.getpid(), "argv": sys.argv, **substitution_report()})
        with open(proof, "a", encoding="utf-8") as f:
            f.write(line + "\n")


def _chain_to_next_sitecustomize() -> None:
    import importlib
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    ours = sys.modules.pop("sitecustomize", None)
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        importlib.import_module("sitecustomize")
    except ImportError:
        pass
    finally:
        sys.path[:] = saved
        if ours is not None:
            sys.modules["sitecustomize"] = ours


_install_and_prove()
_chain_to_next_sitecustomize()
