"""Tests for ``state-diagrams/generate.py``: deterministic DOT output and the drift gate.

Layer: tooling. The generator is loaded from its file (``state-diagrams`` is not a package).
Render tests use a throwaway machine defined here; discovery and ``--check`` tests use a small
throwaway package written to a temporary directory; ``test_committed_diagrams_match_the_code``
is the CI gate that fails when the committed ``.dot`` files drift from txdilation's machines.
"""

from __future__ import annotations

import importlib
import importlib.util
import io
import itertools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Protocol

from automat import TypeMachine, TypeMachineBuilder
from twisted.trial.unittest import SynchronousTestCase

REPO_ROOT = Path(__file__).resolve().parent.parent
DIAGRAMS = REPO_ROOT / "state-diagrams"
GENERATE = DIAGRAMS / "generate.py"


def _load_generator() -> ModuleType:
    name = "_txdilation_state_diagrams_generate"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, GENERATE)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


generate = _load_generator()

EDGE = re.compile(r'^    "((?:[^"\\]|\\.)*)" -> "((?:[^"\\]|\\.)*)"(?: \[label="(.*)"\])?;$')


def _edges(dot: str) -> list[tuple[str, str, str | None]]:
    """(from, to, label) of every edge line of a DOT text, in file order."""
    matches = (EDGE.match(line) for line in dot.splitlines())
    return [(m[1], m[2], m[3]) for m in matches if m]


# --- a throwaway machine --------------------------------------------------------------------


class _DoorInputs(Protocol):
    def open(self) -> None: ...
    def close(self) -> None: ...
    def lock(self, code: str) -> None: ...
    def unlock(self, code: str) -> bool: ...


@dataclass
class _DoorCore:
    pass


def _stored_code(inputs: _DoorInputs, core: _DoorCore, code: str) -> str:
    return code


def _check_code(inputs: _DoorInputs, core: _DoorCore, code: str, stored: str) -> bool:
    return code == stored


# (from, input, to) of the door machine, as declared below.
DOOR_TRANSITIONS = [
    ("closed", "open", "opened"),
    ("opened", "close", "closed"),
    ("closed", "lock", "locked"),
    ("locked", "unlock", "closed"),
    ("opened", "open", "opened"),
]


def _build_door(declare_in_reverse: bool = False) -> TypeMachine[_DoorInputs, _DoorCore]:
    """Build the door machine; the transition declaration order is the only variable."""
    builder = TypeMachineBuilder(_DoorInputs, _DoorCore)
    closed = builder.state("closed")  # the first state declared is the initial state
    opened = builder.state("opened")
    locked = builder.state("locked", _stored_code)
    declarations: list[Callable[[], object]] = [
        lambda: closed.upon(_DoorInputs.open).to(opened).returns(None),
        lambda: opened.upon(_DoorInputs.close).to(closed).returns(None),
        lambda: closed.upon(_DoorInputs.lock).to(locked).returns(None),
        lambda: locked.upon(_DoorInputs.unlock).to(closed)(_check_code),
        lambda: opened.upon(_DoorInputs.open).loop().returns(None),
    ]
    for declare in reversed(declarations) if declare_in_reverse else declarations:
        declare()
    return builder.build()


class RenderTests(SynchronousTestCase):
    """``render_dot`` on a machine defined in this file."""

    def test_each_transition_once_sorted(self) -> None:
        """Every transition is exactly one edge, and edges are sorted by (from, input, to)."""
        dot = generate.render_dot(_build_door(), "door", "tests:door")
        edges = [e for e in _edges(dot) if e[2] is not None]
        keyed = [(old, (label or "").split("\\n")[0], new) for old, new, label in edges]
        self.assertEqual(sorted(keyed), keyed)
        self.assertEqual(sorted(keyed), sorted(DOOR_TRANSITIONS))

    def test_initial_state_marked(self) -> None:
        """The initial state alone is bold and is the target of the unlabelled start edge."""
        dot = generate.render_dot(_build_door(), "door", "tests:door")
        start_edges = [(old, new) for old, new, label in _edges(dot) if label is None]
        self.assertEqual(start_edges, [("__start__", "closed")])
        self.assertIn('"__start__" [shape=point, label=""];', dot)
        bold = [line.split('"')[1] for line in dot.splitlines() if "style=bold" in line]
        self.assertEqual(bold, ["closed"])
        for state in ("locked", "opened"):
            self.assertIn(f'    "{state}";', dot)

    def test_outputs_in_run_order(self) -> None:
        """Edge labels list the outputs after the input, in the order Automat runs them."""
        dot = generate.render_dot(_build_door(), "door", "tests:door")
        labels = {(old, new): label for old, new, label in _edges(dot)}
        self.assertEqual(
            labels[("closed", "locked")], "lock\\n/ data:_stored_code\\n/ returns(None)"
        )
        self.assertEqual(labels[("locked", "closed")], "unlock\\n/ _check_code")

    def test_byte_identical(self) -> None:
        """Rendering is byte-identical across runs and transition declaration orders."""
        machine = _build_door()
        first = generate.render_dot(machine, "door", "tests:door")
        self.assertEqual(first, generate.render_dot(machine, "door", "tests:door"))
        reordered = generate.render_dot(_build_door(True), "door", "tests:door")
        self.assertEqual(first.encode("utf-8"), reordered.encode("utf-8"))

    def test_no_memory_addresses(self) -> None:
        """A ``.returns(obj)`` whose repr has a memory address renders without it."""
        builder = TypeMachineBuilder(_DoorInputs, _DoorCore)
        shut = builder.state("shut")
        marker = object()
        shut.upon(_DoorInputs.unlock).loop().returns(marker)  # type: ignore[arg-type]
        dot = generate.render_dot(builder.build(), "m", "tests:m")
        self.assertNotIn("0x", dot)
        self.assertIn("returns(<object object>)", dot)

    def test_quoting(self) -> None:
        """Quotes and backslashes in names are escaped so the DOT text stays well formed."""
        builder = TypeMachineBuilder(_DoorInputs, _DoorCore)
        odd = builder.state('say "hi"\\')
        odd.upon(_DoorInputs.open).loop().returns(None)
        dot = generate.render_dot(builder.build(), "m", "tests:m")
        self.assertEqual(_edges(dot)[-1][:2], ('say \\"hi\\"\\\\', 'say \\"hi\\"\\\\'))


# --- a throwaway package --------------------------------------------------------------------

FIXTURE_COMMON = '''
from __future__ import annotations
from dataclasses import dataclass
from typing import Protocol
from automat import TypeMachine, TypeMachineBuilder

class Inputs(Protocol):
    def go(self) -> None: ...
    def stop(self) -> None: ...

@dataclass
class Core:
    pass

def build(*names: str) -> TypeMachine[Inputs, Core]:
    """A ring of states: each goes to the next upon go, and stops in place."""
    builder = TypeMachineBuilder(Inputs, Core)
    states = [builder.state(name) for name in names]
    for here, there in zip(states, states[1:] + states[:1]):
        here.upon(Inputs.go).to(there).returns(None)
        here.upon(Inputs.stop).loop().returns(None)
    return builder.build()
'''

FIXTURE_DOOR = """
from __future__ import annotations
from automat import TypeMachineBuilder
from .common import Core, Inputs

_builder = TypeMachineBuilder(Inputs, Core)
_closed = _builder.state("closed")
_opened = _builder.state("opened")
_closed.upon(Inputs.stop).loop().returns(None)
_opened.upon(Inputs.stop).to(_closed).returns(None)

@_closed.upon(Inputs.go).to(_opened)
def _swing(inputs: Inputs, core: Core) -> None:
    pass

_machine = _builder.build()
"""

FIXTURE_FILES = {
    "__init__.py": "",
    "common.py": FIXTURE_COMMON,
    "door.py": FIXTURE_DOOR,
    # sorts before door.py, but the behaviours live in door.py, so door.dot is its diagram
    "alias.py": "from .door import _machine as door_machine\n",
    "twin.py": "from .common import build\n_left = build('a', 'b')\n_right = build('c', 'd')\n",
    "broken.py": "raise ImportError('deliberately broken')\n",
    "sub/__init__.py": "",
    "sub/gate.py": (
        "from ..common import build\n"
        "gate_machine = build('up', 'down')\n"
        "class Holder:\n"
        "    hidden = build('x')\n"
    ),
}

EXPECTED_DIAGRAMS = {"door.dot", "gate.dot", "twin-left.dot", "twin-right.dot"}

_package_numbers = itertools.count()


def temporary_directory(case: SynchronousTestCase) -> Path:
    """A new directory, removed after the test (trial's ``mktemp`` litters the cwd under pytest)."""
    path = tempfile.mkdtemp(prefix="txdilation-state-diagrams-")
    case.addCleanup(shutil.rmtree, path, True)
    return Path(path)


class FixturePackageCase(SynchronousTestCase):
    """Write a throwaway package per test, importable for the duration of the test."""

    def make_package(self, files: dict[str, str] | None = None) -> tuple[str, Path]:
        """Write *files* (default: ``FIXTURE_FILES``) as a fresh package.

        :return: the package name and an (empty, not yet created) output directory.
        """
        root = temporary_directory(self)
        name = f"statediagramsfixture{next(_package_numbers)}"
        for relative, source in (FIXTURE_FILES if files is None else files).items():
            path = root / name / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(source), encoding="utf-8")
        sys.path.insert(0, str(root))
        importlib.invalidate_caches()
        self.addCleanup(self._forget, name, str(root))
        return name, root / "out"

    @staticmethod
    def _forget(name: str, root: str) -> None:
        sys.path.remove(root)
        for module in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
            del sys.modules[module]

    @staticmethod
    def run_main(*argv: str) -> tuple[int, str, str]:
        """Run the generator in-process; return (exit status, stdout, stderr)."""
        out, err = io.StringIO(), io.StringIO()
        status = generate.main(list(argv), out, err)
        return status, out.getvalue(), err.getvalue()


class DiscoveryTests(FixturePackageCase):
    """Finding and naming the machines of a package, and writing their diagrams."""

    def test_one_diagram_per_machine(self) -> None:
        """Module-level machines in all submodules are drawn once each, named by the rule."""
        package, out = self.make_package()
        status, _, _ = self.run_main("--package", package, "--output", str(out), "--no-svg")
        self.assertEqual(status, 0)
        self.assertEqual({p.name for p in out.iterdir()}, EXPECTED_DIAGRAMS)
        self.assertIn(f"from {package}.door:_machine;", (out / "door.dot").read_text())
        self.assertIn(f"from {package}.twin:_right;", (out / "twin-right.dot").read_text())

    def test_import_failure_warns(self) -> None:
        """A module that fails to import is named in a warning, with the error, and skipped."""
        package, out = self.make_package()
        status, _, err = self.run_main("--package", package, "--output", str(out), "--no-svg")
        self.assertEqual(status, 0)
        self.assertIn(f"warning: skipped {package}.broken", err)
        self.assertIn("ImportError: deliberately broken", err)

    def test_class_attribute_machine_warns(self) -> None:
        """A machine bound in a class body is not drawn, and a warning says so."""
        package, out = self.make_package()
        _, _, err = self.run_main("--package", package, "--output", str(out), "--no-svg")
        self.assertIn(f"{package}.sub.gate.Holder.hidden", err)

    def test_name_clash_is_an_error(self) -> None:
        """Two machines that would share a diagram name stop the generator with status 2."""
        files = {
            "__init__.py": "",
            "common.py": FIXTURE_COMMON,
            "one/__init__.py": "",
            "one/x.py": "from ..common import build\nm = build('a')\n",
            "two/__init__.py": "",
            "two/x.py": "from ..common import build\nm = build('b')\n",
        }
        package, out = self.make_package(files)
        status, _, err = self.run_main("--package", package, "--output", str(out))
        self.assertEqual(status, 2)
        self.assertIn("x.dot", err)
        self.assertFalse(out.exists())

    def test_rewrite_removes_stale(self) -> None:
        """A rewrite deletes generated diagrams of vanished machines, keeps hand-written ones."""
        package, out = self.make_package()
        self.run_main("--package", package, "--output", str(out), "--no-svg")
        (out / "old.dot").write_text(f"{generate.HEADER} from x:y; do not edit.\n")
        (out / "old.svg").write_text("<svg/>")
        (out / "hand.dot").write_text("digraph {}\n")
        status, _, err = self.run_main("--package", package, "--output", str(out), "--no-svg")
        self.assertEqual(status, 0)
        self.assertEqual({p.name for p in out.iterdir()}, EXPECTED_DIAGRAMS | {"hand.dot"})
        self.assertIn("hand.dot is not generated", err)

    def test_svg_rendered(self) -> None:
        """With graphviz installed, an .svg is written next to each .dot."""
        if shutil.which("dot") is None:
            raise self.skipTest("graphviz's dot program is not installed")
        package, out = self.make_package()
        status, _, _ = self.run_main("--package", package, "--output", str(out))
        self.assertEqual(status, 0)
        svgs = {p.stem for p in out.glob("*.svg")}
        self.assertEqual(svgs, {name.removesuffix(".dot") for name in EXPECTED_DIAGRAMS})
        self.assertIn("<svg", (out / "door.svg").read_text())


class CheckTests(FixturePackageCase):
    """``--check`` on a throwaway package: every kind of drift is reported."""

    def generated(self) -> tuple[str, Path]:
        package, out = self.make_package()
        status, _, _ = self.run_main("--package", package, "--output", str(out), "--no-svg")
        self.assertEqual(status, 0)
        return package, out

    def check(self, package: str, out: Path) -> tuple[int, str]:
        status, stdout, _ = self.run_main("--check", "--package", package, "--output", str(out))
        return status, stdout

    def test_fresh_output_passes(self) -> None:
        """Right after a write, --check exits 0 and writes nothing."""
        package, out = self.generated()
        before = {p.name: p.read_bytes() for p in out.iterdir()}
        self.assertEqual(self.check(package, out)[0], 0)
        self.assertEqual({p.name: p.read_bytes() for p in out.iterdir()}, before)

    def test_changed(self) -> None:
        """An edited .dot is reported as changed, with a diff, and exits 1."""
        package, out = self.generated()
        path = out / "twin-left.dot"
        path.write_text(path.read_text().replace('"a" -> "b"', '"a" -> "a"'))
        status, stdout = self.check(package, out)
        self.assertEqual(status, 1)
        self.assertIn(f"twin-left.dot: changed (for {package}.twin:_left)", stdout)
        self.assertIn('+    "a" -> "b"', stdout)

    def test_missing(self) -> None:
        """A machine without a .dot is reported as missing and exits 1."""
        package, out = self.generated()
        (out / "door.dot").unlink()
        status, stdout = self.check(package, out)
        self.assertEqual(status, 1)
        self.assertIn(f"door.dot: missing (for {package}.door:_machine)", stdout)

    def test_stale(self) -> None:
        """A .dot for a machine that no longer exists is reported as stale and exits 1."""
        package, out = self.generated()
        (out / "gone.dot").write_text("digraph {}\n")
        status, stdout = self.check(package, out)
        self.assertEqual(status, 1)
        self.assertIn("gone.dot: stale", stdout)

    def test_unverifiable(self) -> None:
        """A .dot of a module that fails to import fails the check and survives a rewrite."""
        package, out = self.generated()
        (out / "broken.dot").write_text(f"{generate.HEADER} from x:y; do not edit.\n")
        status, stdout = self.check(package, out)
        self.assertEqual(status, 1)
        self.assertIn(f"broken.dot: unverifiable ({package}.broken failed to import)", stdout)
        self.run_main("--package", package, "--output", str(out), "--no-svg")
        self.assertTrue((out / "broken.dot").exists())


class CommandLineTests(FixturePackageCase):
    """The script run as a program, in fresh interpreters."""

    def run_script(self, root: Path, *argv: str, seed: str = "0") -> int:
        env = dict(os.environ, PYTHONPATH=str(root), PYTHONHASHSEED=seed)
        return subprocess.run(
            [sys.executable, str(GENERATE), *argv],
            env=env,
            capture_output=True,
            timeout=60,
            check=False,
        ).returncode

    def test_same_bytes_across_hash_seeds(self) -> None:
        """Two interpreters with different hash seeds write byte-identical .dot files."""
        package, out = self.make_package()
        root = out.parent
        outputs = [root / "seed1", root / "seed2"]
        for seed, output in zip(("1", "2"), outputs, strict=True):
            args = ("--package", package, "--output", str(output), "--no-svg")
            self.assertEqual(self.run_script(root, *args, seed=seed), 0)
        first, second = ({p.name: p.read_bytes() for p in o.glob("*.dot")} for o in outputs)
        self.assertEqual(set(first), EXPECTED_DIAGRAMS)
        self.assertEqual(first, second)
        (outputs[0] / "door.dot").write_text("digraph {}\n")
        check = ("--check", "--package", package, "--output", str(outputs[0]))
        self.assertEqual(self.run_script(root, *check), 1)


class RepositoryTests(SynchronousTestCase):
    """The committed diagrams of txdilation itself."""

    def run_check(self, output: Path) -> tuple[int, str]:
        out, err = io.StringIO(), io.StringIO()
        status = generate.main(["--check", "--output", str(output)], out, err)
        return status, out.getvalue() + err.getvalue()

    def test_committed_diagrams_match_the_code(self) -> None:
        """CI drift gate: state-diagrams/*.dot match txdilation's machines exactly.

        On failure, run ``python state-diagrams/generate.py`` and commit the result.
        """
        status, report = self.run_check(DIAGRAMS)
        self.assertEqual(status, 0, report)

    def test_check_detects_edited_copy(self) -> None:
        """--check on a regenerated copy of the diagrams fails once a copy is edited or added."""
        copy = temporary_directory(self) / "copy"
        shutil.copytree(DIAGRAMS, copy, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
        out, err = io.StringIO(), io.StringIO()
        self.assertEqual(generate.main(["--output", str(copy), "--no-svg"], out, err), 0)
        self.assertEqual(self.run_check(copy)[0], 0)
        expected: list[str] = []
        diagrams = sorted(copy.glob("*.dot"))
        if diagrams:
            lines = diagrams[0].read_text().splitlines(keepends=True)
            diagrams[0].write_text("".join(lines[:-2] + lines[-1:]))  # drop the last edge
            expected.append(f"{diagrams[0].name}: changed")
        (copy / "gone.dot").write_text(f"{generate.HEADER} from x:y; do not edit.\n")
        expected.append("gone.dot: stale")
        status, report = self.run_check(copy)
        self.assertEqual(status, 1)
        for line in expected:
            self.assertIn(line, report)

    def test_named_diagrams_exist(self) -> None:
        """Every ``state-diagrams/<name>.dot`` or ``.svg`` named in the docs, the READMEs or the
        package's source is a committed diagram (a machine that moves renames its diagram)."""
        named = re.compile(r"state-diagrams/([\w.-]+\.(?:dot|svg))\b")
        texts = [REPO_ROOT / "README.md", DIAGRAMS / "README.md"]
        texts += sorted((REPO_ROOT / "docs").glob("*.md"))
        texts += sorted((REPO_ROOT / "docs").glob("*/*.md"))
        texts += sorted((REPO_ROOT / "src" / "txdilation").rglob("*.py"))
        dangling = [
            f"{path.relative_to(REPO_ROOT)}: state-diagrams/{name}"
            for path in texts
            if path.exists()
            for name in named.findall(path.read_text(encoding="utf-8"))
            if not (DIAGRAMS / name).exists()
        ]
        self.assertGreater(len(texts), 10)
        self.assertEqual(dangling, [], "rename the reference after its diagram")
