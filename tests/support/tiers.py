"""The release and the per-Python tiers, run beside the main suite.

Layer: test infrastructure. ``python -m tests.support.tiers OUT`` builds the sdist and the
wheel once (``python -m build``, from a copy of the checkout), checks them (``twine check
--strict``; the wheel's metadata, version and contents; the sdist carrying the tests, the docs
and the changelog), then runs the tier of each of Python 3.10 to 3.13 side by side
(``tests.support.tier_steps``; pyenv's interpreters, the main suite's Python also running
README's and the pipx commands). It runs at low priority (nice 10) and writes
``OUT/results.json``; every step is bounded in time, so the whole run is too.

:data:`BACKGROUND` starts it once per test process and waits for its results: the pytest plugin
``tests.support.tiers_plugin`` starts it as collection ends, so that it overlaps the main
suite, and ``tests/test_tiers.py`` collects the results at the end.
"""

from __future__ import annotations

import atexit
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tests.support.harness import REPO_ROOT
from tests.support.tier_steps import Step, as_dicts, expect, run_step, run_tier, unpack

PYTHONS = ("3.10", "3.11", "3.12", "3.13")
#: the main suite's Python: its tier also runs README's and the pipx commands
SUITE_PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"

#: what the checkout's copy leaves out (caches, builds, virtualenvs, test scratch)
_JUNK = shutil.ignore_patterns(
    ".git",
    "__pycache__",
    "*.py[cod]",
    "*.egg-info",
    "build",
    "dist",
    ".tox",
    ".*_cache",
    ".hypothesis",
    "_trial_temp*",
    "tests.test_*",
    "spark-warehouse",
    "metastore_db",
)

#: what the wheel must hold (and not): the drop-in's start-up files, the plugins, package data
WHEEL_MUST_HOLD = (
    "txdilation/_version.py",
    "txdilation/wrap/startup.py",
    "txdilation/_dropin_site/sitecustomize.py",
    "txdilation/telemetry-schema.json",
    "txdilation/py.typed",
    "twisted/plugins/txdilation_plugin.py",
    "twisted/plugins/txdilation_endpoints.py",
    "txdilation_analytics/templates/report.html.j2",
)


def find_python(version: str) -> str | None:
    """pyenv's newest interpreter of ``version`` (``$PYENV_ROOT`` or ``~/.pyenv``), else
    ``python3.X`` on PATH; None if there is none."""
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    found = glob.glob(os.path.join(root, "versions", f"{version}.*", "bin", f"python{version}"))
    patch = lambda path: int(re.findall(rf"{re.escape(version)}\.(\d+)", path)[0])  # noqa: E731
    found = sorted((p for p in found if re.search(rf"/{re.escape(version)}\.\d+/", p)), key=patch)
    return found[-1] if found else shutil.which(f"python{version}")


def build_release(work: Path) -> tuple[list[Step], dict[str, Any]]:
    """Build and check the sdist and the wheel in ``work``; the steps and what was built."""
    logs, dist, source = work / "logs", work / "dist", work / "source"
    logs.mkdir(parents=True)
    shutil.copytree(REPO_ROOT, source, ignore=_JUNK)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    common: dict[str, Any] = {"cwd": work, "env": env, "logs": logs}
    build = [sys.executable, "-m", "build", "--outdir", str(dist), str(source)]
    steps = [run_step("python -m build", build, timeout=600, **common)]
    built: dict[str, Any] = {}
    if not steps[0].ok:
        return steps, built
    [wheel] = dist.glob("*.whl")
    [sdist] = dist.glob("*.tar.gz")
    built.update(wheel=str(wheel), sdist=str(sdist))
    twine = [sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)]
    steps.append(
        run_step("twine check --strict", twine, timeout=120, check=expect("PASSED"), **common)
    )
    version = re.search(
        r'__version__ = "(.+)"', (source / "src/txdilation/_version.py").read_text()
    )
    assert version is not None
    started = time.monotonic()
    problems, built["wheel_contents"] = check_wheel(wheel, version.group(1))
    problems += check_sdist(sdist, version.group(1), work / "unpacked")
    steps.append(
        Step(
            "release contents",
            not problems,
            round(time.monotonic() - started, 1),
            "\n".join(problems),
        )
    )
    return steps, built


def check_wheel(wheel: Path, version: str) -> tuple[list[str], dict[str, Any]]:
    """What is wrong with the wheel, and a summary of it (size, files per top directory)."""
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        [meta] = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = z.read(meta).decode()
    problems = [f"the wheel lacks {n}" for n in WHEEL_MUST_HOLD if n not in names]
    problems += [f"the wheel holds tests: {n}" for n in names if n.startswith("tests/")][:3]
    for line in (
        f"Version: {version}",
        "Requires-Python: >=3.10",
        *(f"Classifier: Programming Language :: Python :: 3.{m}" for m in (10, 11, 12, 13)),
    ):
        if line not in metadata.splitlines():
            problems.append(f"the wheel's METADATA has no {line!r}")
    tops: dict[str, int] = {}
    for name in names:
        parts = name.split("/")
        top = "/".join(parts[:2]) if parts[0] == "twisted" else parts[0]
        tops[top] = tops.get(top, 0) + 1
    summary = {"name": wheel.name, "bytes": wheel.stat().st_size, "files": len(names), "tops": tops}
    return problems, summary


def check_sdist(sdist: Path, version: str, where: Path) -> list[str]:
    """What is wrong with the sdist: it must carry the tests, the docs, the changelog's entry
    for this version, and no caches."""
    tree = unpack(sdist, where)
    problems = [
        f"the sdist lacks {n}"
        for n in (
            "tests/conftest.py",
            "tests/test_exec.py",
            "docs/dropin.md",
            "README.md",
            "examples",
            "src/txdilation/_dropin_site/sitecustomize.py",
        )
        if not (tree / n).exists()
    ]
    changelog = tree / "CHANGELOG.md"
    if not changelog.exists() or f"## txdilation {version} " not in changelog.read_text():
        problems.append(f"the sdist's CHANGELOG.md has no entry for {version}")
    problems += [f"the sdist holds {p}" for p in tree.rglob("__pycache__")][:3]
    return problems


def run_all(out: Path, pythons: tuple[str, ...] = PYTHONS) -> dict[str, Any]:
    """The release, then every tier side by side; results written to ``out/results.json``."""
    started = time.monotonic()
    steps, built = build_release(out / "release")
    results: dict[str, Any] = {"release": {"steps": as_dicts(steps), **built}, "tiers": {}}
    write(out, results)
    if all(s.ok for s in steps):

        def tier(version: str) -> dict[str, Any]:
            python = find_python(version)
            if python is None:
                return {"python": None, "steps": [], "seconds": 0.0}
            tier_started = time.monotonic()
            done = run_tier(
                python,
                Path(built["wheel"]),
                Path(built["sdist"]),
                out / f"py{version}",
                suite_python=version == SUITE_PYTHON,
            )
            return {
                "python": python,
                "steps": as_dicts(done),
                "seconds": round(time.monotonic() - tier_started, 1),
            }

        with ThreadPoolExecutor(len(pythons)) as pool:
            for version, outcome in zip(pythons, pool.map(tier, pythons), strict=True):
                results["tiers"][version] = outcome
    results["seconds"] = round(time.monotonic() - started, 1)
    write(out, results)
    return results


def write(out: Path, results: dict[str, Any]) -> None:
    temporary = out / "results.json.tmp"
    temporary.write_text(json.dumps(results, indent=1))
    temporary.replace(out / "results.json")


def scratch_base() -> str | None:
    """Where the run's files go: memory (``/dev/shm``) when it has room, since four
    virtualenvs are tens of thousands of files to write and remove; else the temporary
    directory."""
    shm = "/dev/shm"
    usable = os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK)
    return shm if usable and shutil.disk_usage(shm).free > 4 << 30 else None


class Background:
    """The run of this module in the background of a test process, started at most once."""

    TIMEOUT = 3600.0  # every step is bounded; this bounds the whole (slow machine, four tiers)

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.out: Path | None = None
        self.started = 0.0

    def start(self) -> None:
        """Start ``python -m tests.support.tiers OUT`` at low priority (once)."""
        if self.proc is not None:
            return
        self.out = Path(tempfile.mkdtemp(prefix="txdilation-tiers-", dir=scratch_base()))
        atexit.register(self.remove)  # under trial, where no plugin removes it
        self.started = time.monotonic()
        log = open(self.out / "runner.log", "wb")  # noqa: SIM115 (the child keeps it)
        nice = ["nice", "-n", "10"] if shutil.which("nice") else []
        self.proc = subprocess.Popen(
            [*nice, sys.executable, "-m", "tests.support.tiers", str(self.out)],
            cwd=REPO_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()

    def results(self) -> dict[str, Any]:
        """Wait for the run (starting it if need be) and return its results."""
        self.start()
        assert self.proc is not None and self.out is not None
        left = self.TIMEOUT - (time.monotonic() - self.started)
        try:
            self.proc.wait(timeout=max(left, 1.0))
        except subprocess.TimeoutExpired:
            self.stop()
        results_file = self.out / "results.json"
        if not results_file.exists():
            log = (self.out / "runner.log").read_text(errors="replace")
            raise AssertionError(f"the tiers left no results (exit {self.proc.returncode}):\n{log}")
        results: dict[str, Any] = json.loads(results_file.read_text())
        results["waited_s"] = round(time.monotonic() - self.started, 1)
        return results

    def stop(self) -> None:
        """End the run if it still goes on (the session was interrupted)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def remove(self) -> None:
        """End the run if need be, and remove its directory (its virtualenvs and builds)."""
        self.stop()
        if self.out is not None:
            shutil.rmtree(self.out, ignore_errors=True)


BACKGROUND = Background()


if __name__ == "__main__":
    outcome = run_all(Path(sys.argv[1]), tuple(sys.argv[2:]) or PYTHONS)
    print(json.dumps(outcome, indent=1))
