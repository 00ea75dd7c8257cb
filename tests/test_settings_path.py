"""One settings path, kept true: the environment is read at the declared edges only, and the
values a person types are parsed by ``txdilation.values`` only.

Layer: repository checks (the source's syntax trees, no import of the modules checked). A new
reader of ``os.environ`` joins :data:`ENVIRON_EDGES` with its reason, or reads its value through
one of them (``Settings.from_process()``, its caller's parameters); a new parser of seconds, sizes
or on/off switches is one of ``txdilation.values``'s, wrapped by the caller.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from twisted.trial import unittest

from tests.support.harness import REPO_ROOT

PACKAGE = REPO_ROOT / "src" / "txdilation"

ENVIRON_EDGES = {
    "settings.py": "Settings.from_process(): the library's TXDILATION_* settings",
    "session/library.py": "the session's TXDILATION_* settings (its own semantics)",
    "session/command_line.py": "the command line: TXDILATION_MAILBOX, the settings checked early",
    "endpoints/strings.py": "a dilation: endpoint string: TXDILATION_MAILBOX",
    "logs.py": "TXDILATION_LOG_LEVEL, TXDILATION_LOG_FILE",
    "session/foreground.py": "txdilation run: whether TXDILATION_LOG_LEVEL is given",
    "session/process.py": "a session process: the parent it watches",
    "session/child.py": "a child session's environment",
    "session/paired_session.py": "the pairing tests' fault injection variable",
    "demo/runner.py": "txdilation demo: loopback defaults, its telemetry file",
    "dropin.py": "the drop-in for tests: loopback defaults, the child environment",
    "wrap/environment.py": "txdilation exec: the child environment",
    "wrap/startup.py": "the drop-in's start in every process",
    "wrap/which.py": "txdilation which: whether it runs under exec",
    "_dropin_site/sitecustomize.py": "the drop-in's start in a child process",
}
"""The modules that may read the process environment, each with what it reads there."""

SWITCH_WORDS = frozenset({"on", "off", "yes", "no", "true", "false"})
VALUES_MODULE = "values.py"


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text(), str(path))


def environ_readers(tree: ast.Module) -> list[int]:
    """The lines of ``tree`` that read the environment: ``os.environ``, ``os.getenv``,
    ``os.environb`` or an import of one of them from ``os``."""
    names = {"environ", "environb", "getenv", "getenvb"}
    lines = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in names
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
        ):
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            lines += [node.lineno for alias in node.names if alias.name in names][:1]
    return sorted(lines)


def _raised_text(function: ast.AST) -> str:
    """The string constants of ``function``'s ``raise`` statements (its error messages)."""
    return " ".join(
        constant.value
        for node in ast.walk(function)
        if isinstance(node, ast.Raise)
        for constant in ast.walk(node)
        if isinstance(constant, ast.Constant) and isinstance(constant.value, str)
    )


def value_parsers(tree: ast.Module) -> list[str]:
    """The parsers of seconds, sizes or switches ``tree`` defines: functions that convert with
    ``float()``/``int()`` and raise about seconds or bytes, and tables of on/off words."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            converts = any(
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Name)
                and call.func.id in ("float", "int")
                for call in ast.walk(node)
            )
            text = _raised_text(node)
            if converts and ("seconds" in text or "bytes" in text):
                found.append(f"{node.name}() (line {node.lineno})")
        elif isinstance(node, ast.Set | ast.Tuple | ast.List):
            words = {
                e.value.strip().lower()
                for e in node.elts
                if isinstance(e, ast.Constant) and isinstance(e.value, str)
            }
            if len(words & SWITCH_WORDS) >= 2:
                found.append(f"on/off words (line {node.lineno})")
    return sorted(found, key=lambda f: int(f.split("line ")[1].rstrip(")")))


class SettingsPathTests(unittest.SynchronousTestCase):
    """The environment's edges and the value parsers stay where they are declared."""

    def test_environment_read_at_the_edges_only(self) -> None:
        """No module outside :data:`ENVIRON_EDGES` reads ``os.environ`` / ``os.getenv``."""
        outside = {
            name: lines
            for name, tree in _modules()
            if name not in ENVIRON_EDGES and (lines := environ_readers(tree))
        }
        self.assertEqual(outside, {}, "read the environment through an edge (see the docstring)")

    def test_edges_are_still_readers(self) -> None:
        """Every declared edge still reads the environment (the list names no stale module)."""
        trees = dict(_modules())
        stale = [name for name in ENVIRON_EDGES if not environ_readers(trees[name])]
        self.assertEqual(stale, [])

    def test_one_parser_per_kind(self) -> None:
        """Only ``txdilation.values`` parses seconds, sizes and switches, and it does."""
        found = {name: parsers for name, tree in _modules() if (parsers := value_parsers(tree))}
        ours = found.pop(VALUES_MODULE, [])
        self.assertEqual(found, {}, "use txdilation.values's parsers")
        self.assertTrue(ours)

    def test_checks_can_fail(self) -> None:
        """The detectors find what they look for: an environment read and both kinds of
        parser, in a module written as the old readers were."""
        tree = ast.parse(
            "import os\n"
            "from os import getenv\n"
            "_YES = ('1', 'on', 'yes', 'true')\n"
            "def timeout(text):\n"
            "    try:\n"
            "        return float(os.environ.get('T', text))\n"
            "    except ValueError:\n"
            "        raise ValueError(f'T must be a number of seconds, not {text!r}') from None\n"
        )
        self.assertEqual(environ_readers(tree), [2, 6])
        self.assertEqual(value_parsers(tree), ["on/off words (line 3)", "timeout() (line 4)"])
