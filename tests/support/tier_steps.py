"""One per-Python tier: a fresh virtualenv installs the wheel, then the steps run from it.

Layer: test infrastructure (used by ``tests.support.tiers``). :func:`run_tier` runs, in order,
each step bounded in time and logged to its own file: the virtualenv and the wheel's install
(not the checkout, not editable); the smoke steps (``twistd dilation --help``, the ``dilation:``
endpoint parsers, ``txdilation demo``, ``txdilation exec`` with its proof line,
``txdilation-analytics --version``); stock magic-wormhole's own 8 dilation tests with
txdilation; and, from the tier's own unpacked sdist, the unit tests, one interop pairing each
way with stock peers and ``txdilation exec``'s tests. The main suite's Python also runs README's
"Use it under your application" commands as written, and docs/dropin.md's pipx ones. A failed
install stops the tier.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tarfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: what a tier installs beside the wheel (its ``demo`` extra: the real servers): the tests' needs
TEST_REQUIREMENTS = ("pytest >= 8", "pytest-twisted >= 1.14", "hypothesis >= 6.100")

#: README's example application (the main suite's Python's tier only)
README_APPLICATION = "fowl == 26.8.0"

#: the unit tests, one interop pairing each way, and exec's tests, from the unpacked sdist
SDIST_TESTS = (
    "tests/wire",
    "tests/link",
    "tests/durable",
    "tests/subchannels",
    "tests/selection",
    "tests/mailbox",
    "tests/testing",
    "tests/test_interop.py::StockLeftTxdilationRight::test_echo_direct_server_leads",
    "tests/test_interop.py::TxdilationLeftStockRight::test_echo_direct_server_leads",
    "tests/test_exec.py",
)

#: on the Python the main suite runs on (which runs all of SDIST_TESTS from the checkout):
#: enough to show that the sdist's tests run against the installed wheel
SDIST_TESTS_SUITE_PYTHON = ("tests/wire", "tests/test_exec.py")

STOCK_DILATION_TESTS = (
    "wormhole.test.dilate.test_full",
    "wormhole.test.dilate.test_api",
    "wormhole.test.dilate.test_connect",
)


def stock_dilation_tests(python: str) -> list[str]:
    """``pytest -p txdilation.dropin --pyargs`` magic-wormhole's own 8 dilation tests."""
    plugins = ["-p", "txdilation.dropin", "-p", "no:cacheprovider"]
    return [python, "-m", "pytest", *plugins, "--pyargs", *STOCK_DILATION_TESTS]


ENDPOINTS = """
from twisted.internet import reactor
from twisted.internet.endpoints import clientFromString, serverFromString
server = serverFromString(reactor, "dilation:subprotocol=chat:code-file=code.txt")
client = clientFromString(reactor, "dilation:subprotocol=chat:code=7-guitarist-revenge")
print(type(server).__name__, type(client).__name__)
try:
    serverFromString(reactor, "dilation:code=7-guitarist-revenge")
except ValueError as e:
    print("refused:", e)
"""


@dataclass
class Step:
    """One step's outcome: ``tail`` is the end of its output when it failed."""

    name: str
    ok: bool
    seconds: float
    tail: str = ""


def run_step(
    name: str,
    argv: Sequence[str],
    *,
    cwd: Path,
    env: dict[str, str],
    logs: Path,
    timeout: float,
    check: Callable[[str], str | None] = lambda out: None,
    shell: bool = False,
) -> Step:
    """Run ``argv`` (in its own process group, killed whole after ``timeout``); ok when it
    exits 0 and ``check(output)`` finds nothing wrong (returns None)."""
    log = logs / (re.sub(r"[^\w.-]+", "_", name) + ".log")
    started = time.monotonic()
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(
            argv if not shell else argv[0],
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            shell=shell,
        )
        try:
            code = proc.wait(timeout=timeout)
            problem = None if code == 0 else f"exit status {code}"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            problem = f"killed after {timeout:.0f} s"
    output = log.read_text(encoding="utf-8", errors="replace")
    problem = problem or check(output)
    seconds = round(time.monotonic() - started, 1)
    tail = "" if problem is None else f"{problem}\n{output[-3000:]}"
    return Step(name, problem is None, seconds, tail)


def expect(*words: str) -> Callable[[str], str | None]:
    """A check: every one of ``words`` is in the output."""
    return lambda out: next((f"{w!r} not in the output" for w in words if w not in out), None)


def pytest_passed(out: str) -> str | None:
    """A check: pytest's summary says passed, and nothing failed or errored."""
    summary = [line for line in out.splitlines() if re.search(r"\d+ passed", line)]
    if not summary:
        return "no pytest summary with passed tests"
    if re.search(r"\d+ (failed|error)", summary[-1]):
        return summary[-1]
    return None


def readme_use_commands(readme: str) -> list[str]:
    """The commands of README's "Use it under your application" section (``$ `` lines of its
    ``console`` block), as written."""
    section = readme.split("## Use it under your application", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```console\n(.*?)\n```", section, flags=re.S)
    assert block is not None, "no console block in the section"
    return [line[2:] for line in block.group(1).splitlines() if line.startswith("$ ")]


def run_tier(
    python: str, wheel: Path, sdist: Path, work: Path, *, suite_python: bool = False
) -> list[Step]:
    """The tier of ``python`` (see the module docstring), in ``work``. ``suite_python``: the
    Python of the main suite, which runs README's and the pipx commands, and from the sdist
    only :data:`SDIST_TESTS_SUITE_PYTHON`."""
    logs, scratch, venv = work / "logs", work / "scratch", work / "venv"
    for d in (logs, scratch):
        d.mkdir(parents=True)
    bin_dir = venv / "bin"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "TXDILATION_"))}
    env.pop("VIRTUAL_ENV", None)
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PIP_NO_INPUT="1",
        TXDILATION_LISTEN_INTERFACE="127.0.0.1",
        TXDILATION_HINT_ADDRESSES="127.0.0.1",
    )
    py, common = str(bin_dir / "python"), {"env": env, "logs": logs}
    steps = [run_step("venv", [python, "-m", "venv", str(venv)], cwd=work, timeout=120, **common)]
    packages = [
        f"{wheel}[demo]",
        *TEST_REQUIREMENTS,
        *([README_APPLICATION] if suite_python else []),
    ]
    install = ["-m", "pip", "install", "-q", "--no-compile", *packages]
    steps.append(run_step("install the wheel", [py, *install], cwd=work, timeout=900, **common))
    if not all(s.ok for s in steps):
        return steps
    version = wheel.name.split("-")[1]
    where = "import txdilation; print(txdilation.__file__, txdilation.__version__)"
    steps.append(
        run_step(
            "txdilation from the wheel",
            [py, "-c", where],
            cwd=scratch,
            timeout=60,
            check=lambda out: (
                None
                if out.startswith(str(venv)) and out.split()[-1] == version
                else f"not the wheel's: {out!r}"
            ),
            **common,
        )
    )
    steps += smoke_steps(bin_dir, scratch, common)
    steps.append(
        run_step(
            "stock's dilation tests",
            stock_dilation_tests(py),
            cwd=scratch,
            timeout=600,
            check=expect("8 passed", "wormhole._dilation -> txdilation"),
            **common,
        )
    )
    tree = unpack(sdist, work / "sdist")
    tests = SDIST_TESTS_SUITE_PYTHON if suite_python else SDIST_TESTS
    pytest = [py, "-m", "pytest", "-p", "no:cacheprovider", "-q", *tests]
    steps.append(
        run_step("sdist tests", pytest, cwd=tree, timeout=900, check=pytest_passed, **common)
    )
    if suite_python:
        steps.append(readme_step(tree, wheel, scratch, common))
        steps.append(pipx_step(bin_dir, wheel, scratch, common))
    return steps


def smoke_steps(bin_dir: Path, scratch: Path, common: dict[str, Any]) -> list[Step]:
    """What a user of the wheel runs first; each from the virtualenv's own scripts."""
    py = str(bin_dir / "python")
    proof = scratch / "smoke.proof"

    def proved(out: str) -> str | None:
        lines = [json.loads(line) for line in proof.read_text().splitlines()]
        return None if [p["took_effect"] for p in lines] == [True] else f"proof: {lines}"

    return [
        run_step(
            "twistd dilation --help",
            [str(bin_dir / "twistd"), "dilation", "--help"],
            cwd=scratch,
            timeout=120,
            check=expect("--allocate-code", "--connect"),
            **common,
        ),
        run_step(
            "dilation: endpoint parsers",
            [py, "-c", ENDPOINTS],
            cwd=scratch,
            timeout=120,
            check=expect("refused: dilation: subprotocol=NAME is required"),
            **common,
        ),
        run_step(
            "txdilation demo",
            [str(bin_dir / "txdilation"), "demo", "--mib", "8", "--cuts", "1"],
            cwd=scratch,
            timeout=300,
            check=expect("SHA-256 verified        yes"),
            **common,
        ),
        run_step(
            "txdilation exec",
            [
                str(bin_dir / "txdilation"),
                "exec",
                "--proof",
                str(proof),
                py,
                "-c",
                "import wormhole",
            ],
            cwd=scratch,
            timeout=120,
            check=proved,
            **common,
        ),
        run_step(
            "txdilation-analytics --version",
            [str(bin_dir / "txdilation-analytics"), "--version"],
            cwd=scratch,
            timeout=120,
            check=expect("txdilation-analytics "),
            **common,
        ),
    ]


def readme_step(tree: Path, wheel: Path, scratch: Path, common: dict[str, Any]) -> Step:
    """README's "Use it under your application" commands, as written, one shell, in a
    directory holding the built wheel (as a user's holds the one they downloaded or built):
    every one succeeds; the application proves it ran on txdilation; ``which`` says txdilation
    while enabled, stock after ``disable``."""
    commands = readme_use_commands((tree / "README.md").read_text(encoding="utf-8"))
    script = "set -e\n" + "".join(f"echo '$ {c}'\n{c}\n" for c in commands)
    script += "echo '# afterwards'\ntxdilation which\n"
    where = scratch / "readme"
    where.mkdir()
    shutil.copy(wheel, where / wheel.name)

    def check(out: str) -> str | None:
        proofs = [json.loads(line) for p in where.glob("*.jsonl") for line in p.open()]
        if not proofs or not all(p["took_effect"] for p in proofs):
            return f"proof: {proofs}"
        reports = re.findall(r"^dilation: (.*)$", out, flags=re.M)
        if len(reports) < 2 or not reports[0].startswith("txdilation "):
            return f"which, while enabled: {reports}"
        if not reports[-1].startswith("stock "):
            return f"which, after disable: {reports}"
        return None

    return run_step(
        "README: use it under your application",
        [script],
        cwd=where,
        timeout=300,
        check=check,
        shell=True,
        **common,
    )


def pipx_step(bin_dir: Path, wheel: Path, scratch: Path, common: dict[str, Any]) -> Step:
    """docs/dropin.md's pipx commands (the wheel for ``txdilation``, fowl's pinned version):
    fowl, installed by pipx, dilates through txdilation once enabled there (its proof line),
    ``which`` says so, and stock again after ``disable``."""
    home = scratch / "pipx"
    env = dict(common["env"], PIPX_HOME=str(home), PIPX_BIN_DIR=str(home / "bin"))
    env.update(PIPX_MAN_DIR=str(home / "man"), TXDILATION_DROPIN_PROOF=str(home / "proof.jsonl"))
    env["PATH"] = f"{home / 'bin'}{os.pathsep}{env['PATH']}"
    script = f"""set -e
        {bin_dir / "python"} -m pip install -q --no-compile pipx
        pipx install '{README_APPLICATION}'
        pipx inject --include-apps fowl {wheel}
        txdilation enable
        fowl --help > /dev/null
        txdilation which
        txdilation disable
        txdilation which
    """

    def check(out: str) -> str | None:
        proofs = [json.loads(line) for line in (home / "proof.jsonl").open()]
        on_pth = [p for p in proofs if p["armed_by"] == "pth" and p["took_effect"]]
        if not any("fowl" in str(p["argv"]) for p in on_pth):
            return f"fowl did not prove it ran on txdilation: {proofs}"
        reports = re.findall(r"^dilation: (.*)$", out, flags=re.M)
        if [r.split()[0] for r in reports] != ["txdilation", "stock"]:
            return f"which: {reports}"
        return None

    return run_step(
        "pipx: inject, enable, disable",
        [script],
        cwd=scratch,
        timeout=600,
        check=check,
        shell=True,
        logs=common["logs"],
        env=env,
    )


def unpack(sdist: Path, where: Path) -> Path:
    """Unpack the sdist into ``where``; its one top directory."""
    with tarfile.open(sdist) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(where, filter="data")
        else:  # a Python without extraction filters: our own sdist, just built
            tar.extractall(where)
    [tree] = list(where.iterdir())
    return tree


def as_dicts(steps: list[Step]) -> list[dict[str, Any]]:
    return [asdict(s) for s in steps]
