"""
Code-quality gates as tests: ruff lint, ruff format, mypy (strict) and import-linter's
contracts (configs in pyproject.toml), and the README's test command being the one CI runs.

Layer: repository checks. Each tool runs from the repository root in a subprocess of this
Python (``python -m TOOL``), so CI needs nothing but the test command. A test is skipped only
when its tool is not installed; any finding fails it with the tool's output in the message.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

from twisted.trial import unittest

from tests.support.harness import REPO_ROOT

TOOL_TIMEOUT = 600.0


def _run_tool(
    testcase: unittest.SynchronousTestCase,
    module: str,
    *args: str,
    command: list[str] | None = None,
) -> None:
    """Run ``python -m module args`` (or ``command``) in the repo root; fail with its output
    unless it exits 0."""
    if importlib.util.find_spec(module) is None:
        raise unittest.SkipTest(f"{module} is not installed (pip install -e '.[dev]')")
    if command is None:
        command = [sys.executable, "-m", module, *args]
    try:
        done = subprocess.run(
            command,
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=TOOL_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        testcase.fail(f"{' '.join(command[2:])} took longer than {TOOL_TIMEOUT} s")
    if done.returncode != 0:
        testcase.fail(
            f"{' '.join(command[2:])} exited with {done.returncode}:\n{done.stdout}{done.stderr}"
        )


class QualityTests(unittest.SynchronousTestCase):
    """The whole tree passes the house linters and the strict type check."""

    def test_ruff_check(self) -> None:
        """``ruff check src tests examples`` finds nothing."""
        _run_tool(self, "ruff", "check", "--no-cache", "src", "tests", "examples")

    def test_ruff_format(self) -> None:
        """``ruff format --check src tests examples``: every file is already formatted."""
        _run_tool(self, "ruff", "format", "--check", "--no-cache", "src", "tests", "examples")

    def test_mypy(self) -> None:
        """``mypy`` (strict, packages and plugins from pyproject.toml) reports no errors."""
        _run_tool(self, "mypy")

    def test_import_layers(self) -> None:
        """``lint-imports``: every contract in pyproject.toml holds: no module imports from a
        layer above its own (``layers``: applications, test helpers, the stock-facing edge,
        mailbox, subchannels|selection, durable|link, telemetry, settings, semantics, wire), no
        import cycle among the modules of any package (``acyclic_siblings``), and the parts
        that must not know each other never import each other, even indirectly
        (``independence``: L4's two halves, the connector's listener and dialing sides, framing
        and Noise, the Manager's helpers)."""
        run = "import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())"
        _run_tool(self, "importlinter", command=[sys.executable, "-c", run])


class ReadmeCommandTests(unittest.SynchronousTestCase):
    """README.md and .ci/run agree on the set-up commands."""

    def test_ci_runs_the_readme_test_command(self) -> None:
        """README has two ``sh`` blocks (main job, tests); .ci/run runs the second verbatim."""
        readme = (REPO_ROOT / "README.md").read_text()
        blocks = re.findall(r"```sh\n(.*?)\n```", readme, flags=re.S)
        self.assertEqual(len(blocks), 2, blocks)
        self.assertIn("txdilation demo", blocks[0])
        ci = (REPO_ROOT / ".ci" / "run").read_text()
        found = re.search(r'^TEST_COMMAND="(.*)"$', ci, flags=re.M)
        self.assertIsNotNone(found, ".ci/run has no TEST_COMMAND line")
        assert found is not None
        self.assertEqual(found.group(1), blocks[1])
        self.assertIn('bash -c "$TEST_COMMAND"', ci)


#: the most lines a module of ``txdilation`` may have (docs/architecture.md): one concern each
MAX_MODULE_LINES = 400


class ModuleSizeTests(unittest.SynchronousTestCase):
    """No module of ``src/txdilation`` is over :data:`MAX_MODULE_LINES` lines."""

    def test_no_module_over_the_limit(self) -> None:
        """Every module is at most MAX_MODULE_LINES lines long."""
        package = REPO_ROOT / "src" / "txdilation"
        too_long = {
            path.relative_to(package).as_posix(): lines
            for path in sorted(package.rglob("*.py"))
            if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
        }
        self.assertEqual(too_long, {}, f"over {MAX_MODULE_LINES} lines: split by concern")


#: the most lines a module docstring of ``txdilation`` may have, quotes included: the layer and
#: its invariants (docs/architecture.md); essays and history belong in docs/ pages
MAX_MODULE_DOCSTRING_LINES = 15


class ModuleDocstringTests(unittest.SynchronousTestCase):
    """Every module docstring of ``src/txdilation`` is short."""

    def test_module_docstrings_are_short(self) -> None:
        """No module docstring spans more than MAX_MODULE_DOCSTRING_LINES source lines."""
        package = REPO_ROOT / "src" / "txdilation"
        too_long = {}
        for path in sorted(package.rglob("*.py")):
            body = ast.parse(path.read_text()).body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                first = body[0]
                lines = (first.end_lineno or first.lineno) - first.lineno + 1
                if lines > MAX_MODULE_DOCSTRING_LINES:
                    too_long[path.relative_to(package).as_posix()] = lines
        self.assertEqual(too_long, {}, "module docstrings: layer and invariants; essays to docs/")


#: folders whose module names are not ours to choose (stock's, for the drop-in)
FOREIGN_NAMES = {"_stock", "_dropin_site"}


class ModuleNameTests(unittest.SynchronousTestCase):
    """A module's file name says what it holds: no two modules of ``src/txdilation`` share one."""

    def test_basenames_unique(self) -> None:
        """Every module's basename (``__init__.py`` aside) is unique across the package, but in
        the folders in FOREIGN_NAMES (stock's module names)."""
        package = REPO_ROOT / "src" / "txdilation"
        where: dict[str, list[str]] = {}
        for path in sorted(package.rglob("*.py")):
            relative = path.relative_to(package)
            if path.name != "__init__.py" and relative.parts[0] not in FOREIGN_NAMES:
                where.setdefault(path.name, []).append(relative.as_posix())
        repeated = {name: paths for name, paths in where.items() if len(paths) > 1}
        self.assertEqual(repeated, {}, "module names repeated: name each for what it holds")


def _folder_lines() -> dict[str, str]:
    """docs/architecture.md's tree: each folder of src/txdilation and its one line."""
    tree = (REPO_ROOT / "docs" / "architecture.md").read_text()
    return dict(re.findall(r"(?m)^  ([a-z_]+)/ +(.+)$", tree))


def _one_line(text: str) -> str:
    """A folder's line as compared: inline literals in single backticks, no final period,
    the first letter in lower case."""
    text = " ".join(text.replace("``", "`").split()).rstrip(".")
    return text[:1].lower() + text[1:]


class FolderTests(unittest.SynchronousTestCase):
    """Each folder of ``src/txdilation`` says its one job in one line, in its ``__init__.py``
    and in docs/architecture.md's tree, and its ``__init__.py`` only re-exports."""

    def packages(self) -> list[Path]:
        package = REPO_ROOT / "src" / "txdilation"
        return sorted(p.parent for p in package.glob("*/__init__.py"))

    def test_one_line_matches_the_tree(self) -> None:
        """The first line of each folder's ``__init__`` docstring is its line in the tree."""
        lines = _folder_lines()
        mismatched = {}
        for folder in self.packages():
            doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
            first = doc.split("\n")[0]
            if _one_line(first) != _one_line(lines.get(folder.name, "(not in the tree)")):
                mismatched[folder.name] = (first, lines.get(folder.name))
        self.assertEqual(mismatched, {}, "docstring's first line != docs/architecture.md's tree")

    def test_init_only_reexports(self) -> None:
        """An ``__init__.py`` holds a docstring, imports, ``__all__`` and at most a lazy
        module ``__getattr__``: no logic."""
        logic = {}
        for folder in self.packages():
            tree = ast.parse((folder / "__init__.py").read_text())
            for node in tree.body[1:]:
                allowed = isinstance(node, (ast.Import, ast.ImportFrom)) or (
                    isinstance(node, ast.Assign)
                    and [getattr(t, "id", None) for t in node.targets] == ["__all__"]
                )
                lazy = isinstance(node, ast.FunctionDef) and node.name == "__getattr__"
                if not (allowed or lazy):
                    logic.setdefault(folder.name, []).append(node.lineno)
        self.assertEqual(logic, {}, "logic in __init__.py: move it to a module")
