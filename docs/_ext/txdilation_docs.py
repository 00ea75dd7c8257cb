"""Sphinx directives that generate txdilation's reference pages from the code itself.

- ``txdilation-cli``: every command's ``--help`` (``txdilation``, its subcommands,
  ``txdilation run``, ``twistd dilation``, ``txdilation-analytics`` and its subcommands), from
  the parsers the commands use (``txdilation.session.helptext`` for the two that Twisted
  parses), each under its own heading;
- ``txdilation-settings``: the Dilation settings a session takes, as option, TOML key and
  environment variable (``txdilation.session.config.DILATION_SETTINGS``);
- ``txdilation-state-diagrams``: every diagram of ``state-diagrams/`` (generated from the
  Automat machines by ``state-diagrams/generate.py``), under the module that holds it.

Each renders Markdown and parses it in place, so the pages stay MyST like the guide.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

REPO = Path(__file__).resolve().parents[2]
HELP_COLUMNS = "100"


class _Generated(SphinxDirective):
    """Parse the Markdown :meth:`markdown` returns where the directive stands."""

    has_content = False

    def markdown(self) -> str:
        raise NotImplementedError

    def run(self) -> list[nodes.Node]:
        container = nodes.section()
        container.document = self.state.document
        lines = StringList(self.markdown().splitlines(), source=self.get_location())
        self.state.nested_parse(lines, self.content_offset, container, match_titles=True)
        return list(container.children)


def _fence(text: str) -> str:
    return f"```text\n{text.rstrip()}\n```\n"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # (argparse keeps its subparsers there only)
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _argparse_pages(parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    """``(command, help)`` of ``parser`` and of every subcommand under it, depth first."""
    pages = [(parser.prog, parser.format_help())]
    for sub in _subcommands(parser).values():
        pages += _argparse_pages(sub)
    return pages


def command_helps() -> list[tuple[str, str]]:
    """Every command's help as it prints it (100 columns wide)."""
    os.environ["COLUMNS"] = HELP_COLUMNS  # (argparse wraps to the terminal's width)
    from txdilation.cli import build_parser
    from txdilation.session.foreground import RunOptions
    from txdilation.session.helptext import help_parser
    from txdilation.session.tap import Options
    from txdilation_analytics.cli import build_parser as analytics_parser

    run = help_parser(RunOptions(), RunOptions.command).format_help()  # (argparse's is a stub)
    pages = [
        (name, run if name == RunOptions.command else text)
        for name, text in _argparse_pages(build_parser())
    ]
    pages.append(("twistd dilation", help_parser(Options(), Options.command).format_help()))
    return pages + _argparse_pages(analytics_parser())


class CommandLineReference(_Generated):
    """``txdilation-cli``: see the module docstring."""

    def markdown(self) -> str:
        return "\n".join(f"## `{name}`\n\n{_fence(text)}" for name, text in command_helps())


class SettingsReference(_Generated):
    """``txdilation-settings``: see the module docstring."""

    def markdown(self) -> str:
        from txdilation.session.config import DILATION_SETTINGS

        rows = [
            f"| `--{d.key}` | `{d.key}` | `{d.variable}` | {d.help.replace('|', '/')} |"
            for d in DILATION_SETTINGS
        ]
        return "\n".join(
            [
                "| option | TOML key | variable | meaning |",
                "|---|---|---|---|",
                *rows,
                "",
            ]
        )


class StateDiagrams(_Generated):
    """``txdilation-state-diagrams``: see the module docstring."""

    def markdown(self) -> str:
        directory = REPO / "state-diagrams"
        here = Path(self.env.doc2path(self.env.docname)).parent
        parts = []
        for svg in sorted(directory.glob("*.svg")):
            relative = os.path.relpath(svg, here)
            parts.append(
                f"## `{svg.stem}`\n\n"
                f"```{{image}} {relative}\n:alt: the {svg.stem} state machine\n```\n"
            )
        return "\n".join(parts)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("txdilation-cli", CommandLineReference)
    app.add_directive("txdilation-settings", SettingsReference)
    app.add_directive("txdilation-state-diagrams", StateDiagrams)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
