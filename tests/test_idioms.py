"""
One idiom per job, kept true: checks over the package's source (docs/architecture.md, "One way
to wait" and "Machines").

Layer: repository checks. Each check reads ``src/txdilation`` with :mod:`ast` (the machines are
also imported, to check them whole), so a module that moves keeps being checked. Each finding
names the file and line. The checks themselves are tested on small snippets: each can fail.

- waiting: no module but ``wire/waiting.py`` keeps a list of Deferreds (an attribute, variable
  or dataclass field annotated as a ``list`` whose element mentions ``Deferred``); waiters go
  through ``wire.waiting`` (``OneShot``, ``Waiters``);
- machines: every ``TypeMachineBuilder(Inputs, Core)`` names its input protocol ``*Events``
  and its core ``*Core``, and its builder calls ``wire.machines.complete()`` before
  ``build()``; every machine built so has a transition for every (state, input) pair; every
  builder is in a ``*_lifecycle.py`` module that binds exactly one module-level ``*_machine``;
- tests (tests/support/hygiene.py): every test has a docstring, and none reaches into a
  private attribute of the package beyond an allow-list that gives each one's reason;
- loggers: every ``Logger`` is ``Logger()`` (named after its module) or uses a ``*NAMESPACE``
  constant where the namespace is observable text; no module imports attrs (dataclasses), but
  ``ATTRS_MODULES``;
- test waits: no test module but ``tests/support/waits.py`` calls ``deferLater`` or defines a
  sleep/wait helper of its own.
"""

from __future__ import annotations

import ast
import functools
import importlib
from collections.abc import Iterator
from pathlib import Path

from automat import TypeMachine
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.support.harness import REPO_ROOT, SRC_DIR
from tests.support.hygiene import (
    ALLOWED_REACH_INS,
    ALLOWED_WITHOUT_DOCSTRINGS,
    private_names,
    python_files,
    reach_ins,
    undocumented_tests,
)
from tests.support.waits import POLL_INTERVAL, sleep, wait_until
from txdilation.testing import missing_transitions

PACKAGE_DIR = SRC_DIR / "txdilation"

#: The one module allowed to keep Deferreds in a list: the waiting idiom itself.
WAITING_MODULE = PACKAGE_DIR / "wire" / "waiting.py"


def _source_files() -> Iterator[Path]:
    yield from sorted(PACKAGE_DIR.rglob("*.py"))


def _relative(path: Path) -> str:
    return str(path.relative_to(SRC_DIR))


def _mentions_deferred(node: ast.expr) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id == "Deferred":
            return True
        if isinstance(sub, ast.Attribute) and sub.attr == "Deferred":
            return True
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and "Deferred" in sub.value:
            return True
    return False


def _is_list_of_deferreds(annotation: ast.expr) -> bool:
    """Whether ``annotation`` has a ``list[...]`` (or ``List``/``deque``) whose element type
    mentions ``Deferred`` anywhere inside it (``dict[K, list[Deferred[T]]]`` too)."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return False
    for sub in ast.walk(annotation):
        if not isinstance(sub, ast.Subscript):
            continue
        container = sub.value
        name = container.id if isinstance(container, ast.Name) else None
        if isinstance(container, ast.Attribute):
            name = container.attr
        if name in ("list", "List", "deque") and _mentions_deferred(sub.slice):
            return True
    return False


def _target_name(target: ast.expr) -> str:
    if isinstance(target, ast.Attribute):
        return target.attr
    if isinstance(target, ast.Name):
        return target.id
    return ast.unparse(target)


def lists_of_deferreds(source: str) -> list[tuple[int, str]]:
    """(line, name) of each annotated assignment in ``source`` that keeps a list of
    Deferreds."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.AnnAssign) and _is_list_of_deferreds(node.annotation):
            found.append((node.lineno, _target_name(node.target)))
    return found


def machine_builders(source: str) -> list[tuple[int, str, str, list[str]]]:
    """For each ``TypeMachineBuilder(Inputs, Core)`` call in ``source``: its line, the names of
    its input protocol and core, and the problems of the function that builds it (no
    ``complete(builder, ...)`` call, or one after ``builder.build()``)."""
    tree = ast.parse(source)
    found = {}  # by line: a builder in a nested function is read with its innermost function
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(function):
            if not (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and _callee(node.value) == "TypeMachineBuilder"
                and len(node.value.args) == 2
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
            ):
                continue
            builder = node.targets[0].id
            inputs, core = (ast.unparse(a) for a in node.value.args)
            found[node.lineno] = (
                node.lineno,
                inputs,
                core,
                _completion_problems(function, builder),
            )
    return [found[line] for line in sorted(found)]


def _callee(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _completion_problems(function: ast.AST, builder: str) -> list[str]:
    completes, builds = [], []
    for node in ast.walk(function):
        if not isinstance(node, ast.Call):
            continue
        if (
            _callee(node) == "complete"
            and node.args
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id == builder
        ):
            completes.append(node.lineno)
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr == "build"
            and isinstance(func.value, ast.Name)
            and func.value.id == builder
        ):
            builds.append(node.lineno)
    if not completes:
        return [f"no complete({builder}, ...) call"]
    if builds and min(completes) > min(builds):
        return [f"complete({builder}, ...) after {builder}.build()"]
    return []


@functools.cache
def _package_builders() -> list[tuple[Path, int, str, str, list[str]]]:
    return [
        (path, *found)
        for path in _source_files()
        for found in machine_builders(path.read_text(encoding="utf-8"))
    ]


def _stripped(name: str) -> str:
    return name.rsplit(".", 1)[-1].lstrip("_")


class ListOfDeferredsCheckTests(SynchronousTestCase):
    """The waiting check finds what it must, and only that."""

    def test_finds_lists_of_deferreds(self) -> None:
        """Attributes, fields and nested containers annotated as lists of Deferreds (string
        annotations too) are found; Waiters, sets and dicts of single Deferreds are not."""
        source = (
            "class A:\n"
            "    waiters: list[Deferred[None]] = field(default_factory=list)\n"
            "    def __init__(self):\n"
            "        self._w: list[Deferred[Any]] = []\n"
            "        self._h: list[tuple[int, defer.Deferred[None]]] = []\n"
            "        self._f: dict[int, list[Deferred[str]]] = {}\n"
            "        self._s: 'list[Deferred[int]]' = []\n"
            "        self._ok: Waiters[None] = Waiters()\n"
            "        self._in_flight: dict[str, Deferred[Any]] = {}\n"
            "        self._deletions: set[Deferred[None]] = set()\n"
            "        self._names: list[str] = []\n"
        )
        self.assertEqual(
            lists_of_deferreds(source),
            [(2, "waiters"), (4, "_w"), (5, "_h"), (6, "_f"), (7, "_s")],
        )


class MachineCheckTests(SynchronousTestCase):
    """The machine check reads names and the complete()-before-build() order right."""

    def test_reads_names_and_completion(self) -> None:
        """A builder without complete(), or with it after build(), is reported; one with it
        before build() is not; the protocol and core names are read as written."""
        source = (
            "def good():\n"
            "    b = TypeMachineBuilder(FooEvents, FooCore)\n"
            "    complete(b, [s])\n"
            "    return b.build()\n"
            "def missing():\n"
            "    b = TypeMachineBuilder(_BarInputs, BarCore)\n"
            "    return b.build()\n"
            "def late():\n"
            "    b = TypeMachineBuilder(BazEvents, BazCore)\n"
            "    m = b.build()\n"
            "    complete(b, [s])\n"
            "    return m\n"
        )
        self.assertEqual(
            machine_builders(source),
            [
                (2, "FooEvents", "FooCore", []),
                (6, "_BarInputs", "BarCore", ["no complete(b, ...) call"]),
                (9, "BazEvents", "BazCore", ["complete(b, ...) after b.build()"]),
            ],
        )


class IdiomTests(SynchronousTestCase):
    """The package keeps one idiom per job."""

    def test_waiters_go_through_wire_waiting(self) -> None:
        """No module but wire/waiting.py keeps a list of Deferreds."""
        found = [
            f"{_relative(path)}:{line}: {name}"
            for path in _source_files()
            if path != WAITING_MODULE
            for line, name in lists_of_deferreds(path.read_text(encoding="utf-8"))
        ]
        self.assertEqual(
            found,
            [],
            "lists of waiting Deferreds: use txdilation.wire.waiting (OneShot, Waiters)",
        )

    def _builders(self) -> list[tuple[Path, int, str, str, list[str]]]:
        builders = _package_builders()
        self.assertGreaterEqual(len(builders), 8, "the check no longer finds the machines")
        return builders

    def test_machine_inputs_and_cores_named_alike(self) -> None:
        """Every machine's input protocol is named ``*Events`` and its core ``*Core``."""
        misnamed = [
            f"{_relative(path)}:{line}: {inputs}, {core}"
            for path, line, inputs, core, _ in self._builders()
            if not (_stripped(inputs).endswith("Events") and _stripped(core).endswith("Core"))
        ]
        self.assertEqual(misnamed, [])

    def test_every_machine_is_completed(self) -> None:
        """Every machine builder calls ``complete()`` before ``build()``."""
        incomplete = [
            f"{_relative(path)}:{line}: {'; '.join(problems)}"
            for path, line, _, _, problems in self._builders()
            if problems
        ]
        self.assertEqual(incomplete, [])

    def test_every_machine_handles_every_pair(self) -> None:
        """Each module-level machine of a module that builds one has a transition for every
        (state, input) pair."""
        machines = 0
        for path in sorted({path for path, *_ in self._builders()}):
            name = ".".join(path.relative_to(SRC_DIR).with_suffix("").parts)
            module = importlib.import_module(name)
            for attribute, value in vars(module).items():
                if isinstance(value, TypeMachine):
                    machines += 1
                    self.assertEqual(missing_transitions(value), [], f"{name}.{attribute}")
        self.assertGreaterEqual(machines, 8)


def _test_files() -> Iterator[tuple[str, str]]:
    """Each ``.py`` file under tests/, as (path from the repository root, source)."""
    for path in python_files(REPO_ROOT / "tests"):
        yield path.relative_to(REPO_ROOT).as_posix(), path.read_text(encoding="utf-8")


@functools.cache
def _test_reach_ins() -> list[tuple[str, int, str]]:
    """The reach-ins of every file under tests/ into the package's private names."""
    package = private_names(p.read_text(encoding="utf-8") for p in python_files(PACKAGE_DIR))
    return [f for path, source in _test_files() for f in reach_ins(source, package, path)]


class TestHygieneCheckTests(SynchronousTestCase):
    """The checks over the tests (tests/support/hygiene.py) find what they look for."""

    def test_finds_undocumented_tests(self) -> None:
        """A test function or method without a docstring is named; helpers and documented
        tests are not."""
        source = (
            "def test_bare(): pass\n"
            "def helper(): pass\n"
            "class T:\n"
            "    def test_told(self):\n"
            "        '''Shows something.'''\n"
            "    async def test_quiet(self): pass\n"
        )
        self.assertEqual(
            undocumented_tests(source, "t.py"),
            [("t.py", 1, "test_bare"), ("t.py", 6, "T.test_quiet")],
        )

    def test_finds_reach_ins(self) -> None:
        """``x._name`` of a name the package defines is a reach-in; on self/cls, a dunder, a
        name only the tests define, or a member of the test file's own class, it is not."""
        package = private_names(["class C:\n    def __init__(self): self._core = self._own = 1\n"])
        source = (
            "class Fake:\n"
            "    def __init__(self): self._own = 2\n"
            "def test(c, fake):\n"
            "    c._core.go(); fake._own; c.__dict__; c._elsewhere\n"
            "    self._core\n"
        )
        self.assertEqual(reach_ins(source, package, "t.py"), [("t.py", 4, "c._core")])


class TestHygieneTests(SynchronousTestCase):
    """Every test has a docstring; no test reaches into the package's private attributes
    beyond the allow-list (tests/support/hygiene.py), and the allow-list holds no stale entry."""

    def test_every_test_has_a_docstring(self) -> None:
        """Each test function or method under tests/ says what it shows."""
        missing = [
            f"{path}:{line}: {name}"
            for source_path, source in _test_files()
            for path, line, name in undocumented_tests(source, source_path)
            if (path, name) not in ALLOWED_WITHOUT_DOCSTRINGS
        ]
        self.assertEqual(missing, [], "give each of these tests a docstring")

    def test_no_new_reach_ins(self) -> None:
        """A test reaching into a private attribute of the package uses its public seam
        instead (or is allowed, with a reason, in ALLOWED_REACH_INS)."""
        new = [
            f"{path}:{line}: {text}"
            for path, line, text in _test_reach_ins()
            if (path, text.rsplit(".", 1)[1]) not in ALLOWED_REACH_INS
        ]
        self.assertEqual(new, [], "use the public seam (or allow it with a reason)")

    def test_allow_lists_are_current(self) -> None:
        """Every allowed reach-in and undocumented test still exists: one removed is struck
        from the allow-list."""
        found = {(path, text.rsplit(".", 1)[1]) for path, _line, text in _test_reach_ins()}
        self.assertEqual(sorted(set(ALLOWED_REACH_INS) - found), [], "stale ALLOWED_REACH_INS")
        undocumented = {
            (path, name)
            for source_path, source in _test_files()
            for path, _line, name in undocumented_tests(source, source_path)
        }
        stale = sorted(set(ALLOWED_WITHOUT_DOCSTRINGS) - undocumented)
        self.assertEqual(stale, [], "stale ALLOWED_WITHOUT_DOCSTRINGS")


# --- logger namespaces and the dataclass idiom -------------------------------------------------

#: The one module that may import attrs: stock's ``DilationStatus`` is an attrs class, and
#: reading its fields (to stay indistinguishable from it) takes ``attrs.fields``.
ATTRS_MODULES: frozenset[str] = frozenset({"txdilation/mailbox/status_reporter.py"})


def borrowed_namespaces(source: str) -> list[tuple[int, str]]:
    """The ``Logger(...)`` calls in ``source`` that name their namespace other than by an
    observable ``*NAMESPACE`` constant (a string typed by hand, or any other expression):
    (line, the call's text). ``Logger()`` takes the module's name, which is the idiom."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and _callee(node) == "Logger"):
            continue
        for keyword in node.keywords:
            if keyword.arg != "namespace":
                continue
            value = keyword.value
            name = value.id if isinstance(value, ast.Name) else None
            if isinstance(value, ast.Attribute):
                name = value.attr
            if name is None or not name.endswith("NAMESPACE"):
                found.append((node.lineno, ast.unparse(node)))
        if node.args:
            found.append((node.lineno, ast.unparse(node)))
    return found


def imports_attrs(source: str) -> list[int]:
    """The lines of ``source`` that import ``attrs`` or ``attr``."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module.split(".")[0]]
        else:
            continue
        if {"attr", "attrs"} & set(names):
            lines.append(node.lineno)
    return lines


class NamespaceAndDataclassCheckTests(SynchronousTestCase):
    """The two checks below find what they look for."""

    def test_namespace_check(self) -> None:
        """A namespace typed by hand or borrowed is found; ``Logger()`` and a ``NAMESPACE``
        constant (observable text) are not."""
        source = (
            "_a = Logger()\n"
            '_b = Logger(namespace="txdilation.x")\n'
            "_c = Logger(namespace=NAMESPACE)\n"
            "_d = Logger(namespace=vocabulary.NAMESPACE, observer=o)\n"
            "_e = Logger(namespace=other)\n"
            '_f = twisted.logger.Logger("x")\n'
        )
        self.assertEqual([line for line, _ in borrowed_namespaces(source)], [2, 5, 6])

    def test_attrs_check(self) -> None:
        """``import attrs``, ``import attr`` and ``from attr(s)... import`` are found."""
        source = (
            "import attrs\nimport attr.validators\nfrom attrs import frozen\n"
            "from dataclasses import dataclass\nimport attrsx\nfrom .attrs import y\n"
        )
        self.assertEqual(imports_attrs(source), [1, 2, 3])


class NamespaceAndDataclassIdiomTests(SynchronousTestCase):
    """Loggers are named after their module; dataclasses, not attrs."""

    def test_logger_namespaces_come_from_the_module(self) -> None:
        """Every ``Logger`` in the package is ``Logger()`` (Twisted names it after the module),
        or uses a ``*NAMESPACE`` constant where the namespace is observable text (the session's
        and the endpoints' lines, telemetry)."""
        found = [
            f"{_relative(path)}:{line}: {call}"
            for path in _source_files()
            for line, call in borrowed_namespaces(path.read_text(encoding="utf-8"))
        ]
        self.assertEqual(found, [], "use Logger() at module level")

    def test_src_does_not_import_attrs(self) -> None:
        """The package's records are dataclasses: no module imports attrs but those in
        ATTRS_MODULES (each of which must still)."""
        found, allowed = [], set()
        for path in _source_files():
            lines = imports_attrs(path.read_text(encoding="utf-8"))
            if _relative(path) in ATTRS_MODULES:
                allowed.update(_relative(path) for _ in lines[:1])
            elif lines:
                found.extend(f"{_relative(path)}:{line}" for line in lines)
        self.assertEqual(found, [], "use dataclasses")
        self.assertEqual(sorted(allowed), sorted(ATTRS_MODULES))


# ---------------------------------------------------------------------------------------------
# tests wait one way (tests/support/waits.py)

TESTS_DIR = Path(__file__).resolve().parent

#: The one test module that may call ``deferLater``: the shared waits themselves.
WAITS_MODULE = TESTS_DIR / "support" / "waits.py"

#: Module-level names a test module's own sleep or wait helper would take.
WAIT_HELPER_NAMES = frozenset({"sleep", "until", "wait_until", "eventually", "wait_for"})


def own_wait_helpers(source: str) -> list[tuple[int, str]]:
    """(line, what) of each call to ``deferLater`` and each module-level function named like a
    sleep or wait helper, in ``source``."""
    tree = ast.parse(source)
    found = [
        (node.lineno, f"def {node.name}")
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.name in WAIT_HELPER_NAMES
    ]
    found += [
        (node.lineno, "deferLater()")
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and _callee(node).rsplit(".", 1)[-1] == "deferLater"
    ]
    return sorted(found)


class OwnWaitHelperCheckTests(SynchronousTestCase):
    """The test-waits check finds what it must, and only that."""

    def test_finds_own_sleeps_and_waits(self) -> None:
        """A module-level sleep/until helper and any deferLater call (bare or through
        ``task.``) are found; a method named sleep (a simulated world's) and calls of the shared
        helpers are not."""
        source = (
            "async def sleep(reactor, seconds):\n"
            "    await deferLater(reactor, seconds, lambda: None)\n"
            "def until(p):\n"
            "    return task.deferLater(reactor, 0, lambda: None)\n"
            "class World:\n"
            "    def sleep(self, seconds):\n"
            "        self.clock.advance(seconds)\n"
            "async def test():\n"
            "    await wait_until(lambda: True, 1.0)\n"
            "    await waits.sleep(0.1)\n"
        )
        self.assertEqual(
            own_wait_helpers(source),
            [(1, "def sleep"), (2, "deferLater()"), (3, "def until"), (4, "deferLater()")],
        )


class TestsWaitOneWayTests(SynchronousTestCase):
    """Real-reactor tests wait through tests/support/waits.py only."""

    def test_no_test_module_has_its_own_wait_helper(self) -> None:
        """No module under tests/ but tests/support/waits.py calls ``deferLater`` or defines a
        module-level sleep/wait helper of its own."""
        found = [
            f"{path.relative_to(TESTS_DIR.parent)}:{line}: {what}"
            for path in sorted(TESTS_DIR.rglob("*.py"))
            if path != WAITS_MODULE
            for line, what in own_wait_helpers(path.read_text(encoding="utf-8"))
        ]
        self.assertEqual(found, [], "wait with tests.support.waits (sleep, wait_until)")


class SharedWaitsTests(SynchronousTestCase):
    """The shared waits themselves, on a Clock."""

    def test_wait_until_fires_once_true_and_fails_naming_what_after_timeout(self) -> None:
        """``wait_until`` fires on the first poll that finds the predicate true, and fails
        naming what it waited for once ``timeout`` passed; ``sleep`` fires after its delay."""
        clock = Clock()
        ready: list[bool] = []
        met = Deferred.fromCoroutine(wait_until(lambda: ready, 1.0, "ready", clock))
        clock.advance(POLL_INTERVAL)
        self.assertNoResult(met)
        ready.append(True)
        clock.advance(POLL_INTERVAL)
        self.successResultOf(met)

        never = Deferred.fromCoroutine(wait_until(lambda: False, 0.5, "nothing", clock))
        clock.pump([POLL_INTERVAL] * 60)
        failure = self.failureResultOf(never, AssertionError)
        self.assertIn("timed out after 0.5 s waiting for nothing", str(failure.value))

        slept = sleep(2.0, clock)
        clock.advance(1.9)
        self.assertNoResult(slept)
        clock.advance(0.1)
        self.successResultOf(slept)


# --- one name and one place for machines ---------------------------------------------------------


def machine_module_problems(filename: str, source: str) -> list[str]:
    """What is wrong with where a module's machine lives: a module that calls
    ``TypeMachineBuilder(`` must be named ``*_lifecycle.py`` and bind exactly one module-level
    ``*_machine`` (assigned, not imported). A module without such a call has no problem."""
    tree = ast.parse(source)
    builders = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and _callee(node) == "TypeMachineBuilder"
    ]
    if not builders:
        return []
    problems = []
    if not filename.endswith("_lifecycle.py"):
        problems.append(f"{builders[0]}: TypeMachineBuilder outside a *_lifecycle.py module")
    bound = []
    for statement in tree.body:
        if isinstance(statement, ast.Assign):
            targets = statement.targets
        elif isinstance(statement, ast.AnnAssign):
            targets = [statement.target]
        else:
            continue
        for target in targets:
            for node in ast.walk(target):
                if isinstance(node, ast.Name) and len(node.id) > 8 and node.id.endswith("_machine"):
                    bound.append(node.id)
    if len(bound) != 1:
        problems.append(f"module-level *_machine names: {sorted(bound)} (one expected)")
    return problems


class MachineModuleCheckTests(SynchronousTestCase):
    """The machine-module check finds a misplaced builder and a wrong count of machines."""

    def test_finds_misplaced_machines(self) -> None:
        """A builder outside ``*_lifecycle.py``, none or two module-level ``*_machine`` names
        (an import or a function does not count) are found; one machine in a lifecycle module,
        or no builder at all, is fine."""
        build = (
            "def _build():\n    b = TypeMachineBuilder(FooEvents, FooCore)\n    return b.build()\n"
        )
        one = build + "foo_machine = _build()\n"
        self.assertEqual(machine_module_problems("foo_lifecycle.py", one), [])
        self.assertEqual(machine_module_problems("foo.py", "x = 1\n"), [])
        self.assertEqual(
            machine_module_problems("foo.py", one),
            ["2: TypeMachineBuilder outside a *_lifecycle.py module"],
        )
        self.assertEqual(
            machine_module_problems("foo_lifecycle.py", one + "bar_machine: Any = _build()\n"),
            ["module-level *_machine names: ['bar_machine', 'foo_machine'] (one expected)"],
        )
        imported = "from x import foo_machine\n" + build + "def _build_machine(): pass\n"
        self.assertEqual(
            machine_module_problems("foo_lifecycle.py", imported),
            ["module-level *_machine names: [] (one expected)"],
        )


class MachineModuleTests(SynchronousTestCase):
    """One name and one place for every Automat machine."""

    def test_machines_live_in_lifecycle_modules(self) -> None:
        """Every module of the package that calls ``TypeMachineBuilder(`` is a
        ``*_lifecycle.py`` module that binds exactly one module-level ``*_machine``."""
        checked, problems = 0, []
        for path in _source_files():
            source = path.read_text(encoding="utf-8")
            if "TypeMachineBuilder(" in source:
                checked += 1
            problems += [
                f"{_relative(path)}:{problem}"
                for problem in machine_module_problems(path.name, source)
            ]
        self.assertGreaterEqual(checked, 8, "the check no longer finds the machines")
        self.assertEqual(problems, [], "a machine goes in its own *_lifecycle.py module")
