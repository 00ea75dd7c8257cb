"""
Commands for network namespaces, their sweeping, what this machine supports, and the policy.

Layer: test infrastructure (not shipped), below ``tests.support.netns``. Every command here is
bounded in time and raises ``NetnsError`` with the command's own message when it fails.

- ``sh`` runs a command here; ``destroy_namespace`` kills what runs inside a namespace and
  deletes it; ``sweep_leftovers`` removes ours (``txdn-<pid>-...``) whose process is gone.
- ``namespace_support()`` / ``netem_available()`` probe the machine once and cache the answer.
- ``require_namespaces()`` is the policy: skip with the reason printed where namespaces cannot
  be created, but fail under ``CI=true`` (the suite must never pass by not testing).
- ``python_environment()`` is the environment for Python children inside a namespace.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from unittest import SkipTest

PREFIX = "txdn"
REPO_ROOT = Path(__file__).resolve().parent.parent.parent
SRC_DIR = REPO_ROOT / "src"
COMMAND_TIMEOUT = 15.0
TERMINATE_GRACE = 1.0

# the variables tests/conftest.py sets to confine txdilation to loopback
LOOPBACK_VARIABLES = ("TXDILATION_LISTEN_INTERFACE", "TXDILATION_HINT_ADDRESSES")


class NetnsError(RuntimeError):
    """A command that builds or changes a topology failed (its output is in the message)."""


class NamespacesRequired(AssertionError):
    """Namespaces cannot be created and ``CI=true``: the test fails instead of skipping."""


# ---------------------------------------------------------------------------------------------
# commands


def sh(argv: Sequence[str], *, input: str | None = None, timeout: float = COMMAND_TIMEOUT) -> str:
    """
    Run a command to completion in this process's namespace and return its stdout.

    :raises NetnsError: when it exits non-zero or takes longer than ``timeout`` seconds.
    """
    try:
        done = subprocess.run(
            list(argv), input=input, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        raise NetnsError(f"{' '.join(argv)}: no answer within {timeout} s") from None
    if done.returncode != 0:
        raise NetnsError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def list_namespaces() -> list[str]:
    """The names of every named network namespace (``ip netns list``)."""
    return [line.split()[0] for line in sh(["ip", "netns", "list"]).splitlines() if line.strip()]


def namespace_pids(netns: str) -> list[int]:
    """The processes inside a namespace (``ip netns pids``); none if it is gone."""
    try:
        return [int(p) for p in sh(["ip", "netns", "pids", netns]).split()]
    except NetnsError:
        return []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def destroy_namespace(netns: str, attempts: int = 5) -> None:
    """
    Kill every process inside ``netns`` (SIGKILL), then delete it. Quiet if it is gone.
    Tried again a few times: a process entering it at that moment (``ip netns exec``) can
    make the deletion fail once.

    :raises NetnsError: if it still exists after ``attempts`` tries.
    """
    for attempt in range(attempts):
        for pid in namespace_pids(netns):
            if pid != os.getpid():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5.0
        while namespace_pids(netns) and time.monotonic() < deadline:
            time.sleep(0.02)
        try:
            sh(["ip", "netns", "del", netns])
            return
        except NetnsError:
            if netns not in list_namespaces():
                return
            if attempt + 1 == attempts:
                raise
            time.sleep(0.1)


def sweep_leftovers(prefix: str = PREFIX) -> list[str]:
    """
    Remove the namespaces an earlier run left behind: those named ``<prefix>-<pid>-...`` whose
    process ``<pid>`` no longer exists (a run in progress elsewhere is left alone).

    :returns: the names removed.
    """
    pattern = re.compile(rf"^{re.escape(prefix)}-(\d+)-")
    removed = []
    for netns in list_namespaces():
        found = pattern.match(netns)
        if found and not _alive(int(found.group(1))):
            destroy_namespace(netns)
            removed.append(netns)
    return removed


def python_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """
    The environment for a Python child inside a namespace: this process's, with this checkout's
    ``src`` and root first on ``PYTHONPATH``, unbuffered output, and without the loopback
    confinement variables (a namespace's own addresses exist only there).
    """
    env = {k: v for k, v in os.environ.items() if k not in LOOPBACK_VARIABLES}
    paths = [str(SRC_DIR), str(REPO_ROOT)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


# ---------------------------------------------------------------------------------------------
# capabilities and the skip/fail policy

_support: dict[str, str | None] = {}


def namespace_support() -> str | None:
    """
    Whether this machine lets us build namespaces: ``None`` if so, else the reason (cached).

    Checks root, the ``ip``, ``nft`` and ``setpriv`` programs, and creates and deletes a
    namespace holding a veth pair.
    """
    if "namespaces" not in _support:
        _support["namespaces"] = _probe_namespaces()
    return _support["namespaces"]


def _probe_namespaces() -> str | None:
    if not sys.platform.startswith("linux"):
        return f"network namespaces are Linux only (this is {sys.platform})"
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    for program in ("ip", "nft", "setpriv"):
        if shutil.which(program) is None:
            return f"the {program!r} program is not installed"
    probe = f"{PREFIX}-{os.getpid()}-probe"
    try:
        sh(["ip", "netns", "add", probe])
        try:
            sh(["ip", "-n", probe, "link", "add", "p0", "type", "veth", "peer", "name", "p1"])
            sh(["ip", "netns", "exec", probe, "nft", "list", "ruleset"])
        finally:
            destroy_namespace(probe)
    except (NetnsError, OSError) as e:
        return f"cannot create a network namespace with a veth pair and nftables: {e}"
    return None


def netem_support() -> str | None:
    """Whether ``tc`` can add a netem qdisc here: ``None`` if so, else why not (cached; many
    minimal kernels are built without sch_netem)."""
    if "netem" not in _support:
        _support["netem"] = _probe_netem()
    return _support["netem"]


def netem_available() -> bool:
    """``netem_support() is None``."""
    return netem_support() is None


def _probe_netem() -> str | None:
    if shutil.which("tc") is None:
        return "no tc"
    probe = f"{PREFIX}-{os.getpid()}-netem"
    try:
        sh(["ip", "netns", "add", probe])
        try:
            sh(["ip", "-n", probe, "link", "add", "p0", "type", "veth", "peer", "name", "p1"])
            netem = ["tc", "qdisc", "add", "dev", "p0", "root", "netem", "delay", "1ms"]
            sh(["ip", "netns", "exec", probe, *netem])
        finally:
            destroy_namespace(probe)
    except NetnsError as e:
        return str(e)
    return None


def require_namespaces(
    *, environ: Mapping[str, str] | None = None, reason: str | None = None
) -> None:
    """
    The policy for tests that need namespaces: return if they can be created; otherwise print
    the reason and skip the test, or, under ``CI=true``, fail it.

    :param environ: the environment to read ``CI`` from (default ``os.environ``).
    :param reason: why namespaces are unavailable (default: ``namespace_support()``).
    :raises unittest.SkipTest: when they are unavailable outside CI.
    :raises NamespacesRequired: when they are unavailable and ``CI`` is ``true``.
    """
    env = os.environ if environ is None else environ
    if reason is None:
        reason = namespace_support()
    if reason is None:
        return
    print(f"network namespaces unavailable: {reason}", file=sys.stderr)
    if env.get("CI", "").lower() == "true":
        raise NamespacesRequired(f"CI=true and network namespaces are unavailable: {reason}")
    raise SkipTest(f"network namespaces unavailable: {reason}")


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """End a process we started: close its stdin, then SIGTERM, then SIGKILL; reap it."""
    if process.stdin is not None:
        with contextlib.suppress(OSError):
            process.stdin.close()
    try:
        process.wait(timeout=TERMINATE_GRACE)
        return
    except subprocess.TimeoutExpired:
        pass
    process.terminate()
    try:
        process.wait(timeout=TERMINATE_GRACE)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=COMMAND_TIMEOUT)
