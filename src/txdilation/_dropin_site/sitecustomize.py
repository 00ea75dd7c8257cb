"""Arm txdilation in every Python process that has this directory on ``PYTHONPATH``.

Python imports ``sitecustomize`` at start-up. ``txdilation exec`` (and the pytest plugin
``txdilation.dropin``) put this directory first on ``PYTHONPATH`` and set
``TXDILATION_DROPIN=1``, so that every Python process under them (a ``fowld`` that
``git-withme`` spawns, say) dilates through txdilation: ``txdilation.wrap.startup.arm()``
installs it when the process first imports ``wormhole``. A Python that cannot import txdilation
(another environment, another version) runs as it would without it, and with
``TXDILATION_DROPIN_PROOF=PATH`` appends one JSON line to PATH saying so. Afterwards the next
``sitecustomize`` on ``sys.path`` (the one this file shadows, if any) runs.

Written for any Python that may meet ``PYTHONPATH`` (2.7 too): no f-strings, no annotations.
This directory is not a package: nothing here is imported as ``txdilation.<name>``.
"""


def _arm():
    # type: () -> None
    import os

    if os.environ.get("TXDILATION_DROPIN") != "1":
        return
    try:
        from txdilation.wrap.startup import arm
    except Exception as e:  # another environment: run as without txdilation, and say so
        why = "{}: {}".format(type(e).__name__, e)  # noqa: UP032 (any Python: no f-string)
        _prove_absent("txdilation is not importable by this Python (" + why + ")")
        return
    arm("sitecustomize")


def _prove_absent(reason):
    # type: (str) -> None
    import json
    import os
    import platform
    import sys

    path = os.environ.get("TXDILATION_DROPIN_PROOF")
    if not path:
        return
    line = {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "argv": getattr(sys, "argv", None),  # Python 2 sets it after site
        "executable": sys.executable,
        "armed_by": "sitecustomize",
        "took_effect": False,
        "implementation": None,
        "versions": {"python": platform.python_version()},
        "reason": reason,
        "substituted": False,
    }
    try:
        with open(path, "a") as f:
            f.write(json.dumps(line) + "\n")
    except (IOError, OSError):  # noqa: UP024 (Python 2 has both)
        pass


def _chain_to_next_sitecustomize():
    # type: () -> None
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


_arm()
_chain_to_next_sitecustomize()
