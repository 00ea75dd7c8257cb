"""What a run is given, checked before the JVM starts: input files, usage databases, stages.

Layer: plain Python (no pyspark import), run by the command line before Spark starts, so that
a person's mistake costs no JVM start and gets one line (:class:`~.errors.InputError`):

- every local input exists (a glob matches something), a usage database is an SQLite file with
  its server's tables (:func:`check_usage_db`);
- a stage run before the stage it reads from says which one to run first
  (:func:`check_stage`, local outputs only: remote ones are checked once Spark runs);
- :func:`local_bytes` sums what a run will read, to choose Spark's small profile.

Remote locations (``hdfs://``, ``s3a://``...) are left for Spark to open.
"""

from __future__ import annotations

import datetime
import glob
import os
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import InputError

SOURCES = ("events", "mailbox_usage_db", "transit_log", "transit_usage_db", "client_timing")
"""Every input source, by the name of its option (``--events``, ``--mailbox-usage-db``...)."""
GLOB_SOURCES = ("events", "client_timing")
USAGE_TABLES = {
    "mailbox_usage_db": ("nameplates", "mailboxes", "client_versions"),
    "transit_usage_db": ("usage",),
}
"""The tables a usage database must have, per source."""

SMALL_INPUT_BYTES = 64 * 2**20
"""Below this much input (local files and bronze tables), runs use Spark's small profile."""


def is_remote(path: str) -> bool:
    """True for paths with a filesystem scheme other than a plain local path."""
    return "://" in path and not path.startswith("file:")


def local_path(path: str) -> str:
    """``file:`` URLs as plain paths; other paths unchanged."""
    if path.startswith("file://"):
        return path[len("file://") :]
    return path.removeprefix("file:")


def option_of(source: str) -> str:
    """The command-line option of a source: ``--mailbox-usage-db`` for ``mailbox_usage_db``."""
    return "--" + source.replace("_", "-")


def expand(option: str, pattern: str) -> list[str]:
    """Return the input files for a glob, a file or a directory (its files, recursively, hidden
    ones and Spark's markers left out), as absolute paths, sorted; remote patterns are left
    for Spark to expand.

    :raises InputError: a local pattern matches nothing, or only empty directories.
    """
    if is_remote(pattern):
        return [pattern]
    matches = sorted(glob.glob(os.path.expanduser(local_path(pattern))))
    if not matches:
        raise InputError(f"{option}: no file matches {pattern!r}")
    files: list[str] = []
    for match in matches:
        if os.path.isdir(match):
            for root, dirs, names in os.walk(match):
                dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
                files.extend(
                    os.path.join(root, n) for n in sorted(names) if not n.startswith((".", "_"))
                )
        else:
            files.append(match)
    if not files:
        raise InputError(f"{option}: no file in {pattern!r}")
    return [os.path.abspath(f) for f in files]


def check_usage_db(source: str, path: str) -> None:
    """Check that ``path`` is a local SQLite file with the tables of ``source``'s server.

    :raises InputError: remote, missing, not SQLite, or a table missing.
    """
    option = option_of(source)
    if is_remote(path):
        raise InputError(f"{option}: SQLite files must be local, got {path!r}")
    if not os.path.isfile(path):
        raise InputError(f"{option}: no such file {path!r}")
    try:
        db = sqlite3.connect(f"file:{os.path.abspath(path)}?mode=ro", uri=True)
    except sqlite3.Error as e:
        raise InputError(f"{option}: cannot open {path!r}: {e}") from e
    try:
        try:
            present = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
        except sqlite3.DatabaseError as e:
            raise InputError(f"{option}: {path!r} is not an SQLite database: {e}") from e
    finally:
        db.close()
    missing = sorted(set(USAGE_TABLES[source]) - present)
    if missing:
        raise InputError(
            f"{option}: {path!r} is not a usage database (missing table {missing[0]!r})"
        )


@dataclass(frozen=True)
class Inputs:
    """What ``ingest`` reads; every field optional, at least one required."""

    events: str | None = None
    mailbox_usage_db: str | None = None
    transit_log: str | None = None
    transit_usage_db: str | None = None
    client_timing: str | None = None

    def given(self) -> dict[str, str]:
        """The inputs that were given, by source name."""
        return {name: getattr(self, name) for name in SOURCES if getattr(self, name)}

    def check(self) -> None:
        """Fail fast, before Spark starts, when nothing is given, a local input is missing or
        a usage database is not one.

        :raises InputError: with the option name and the path.
        """
        if not self.given():
            raise InputError(
                "ingest needs at least one of --events, --mailbox-usage-db, --transit-log,"
                " --transit-usage-db, --client-timing"
            )
        for name, location in self.given().items():
            option = option_of(name)
            if name in GLOB_SOURCES:
                expand(option, location)
            elif name in USAGE_TABLES:
                check_usage_db(name, location)
            elif not is_remote(location) and not os.path.isfile(local_path(location)):
                raise InputError(f"{option}: no such file {location!r}")

    def files(self) -> dict[str, list[str]]:
        """The input files of every given source (a remote glob stays one pattern)."""
        out = {}
        for name, location in self.given().items():
            if name in GLOB_SOURCES:
                out[name] = expand(option_of(name), location)
            else:
                out[name] = [location if is_remote(location) else os.path.abspath(location)]
        return out


@dataclass(frozen=True)
class DayRange:
    """The UTC days a run covers (``--from``/``--to``; None: unbounded on that side).

    A session belongs to the day it was requested on (its first event, ``seq`` 0); a range
    selects those sessions, with their events up to the end of the day after ``last`` (so a
    session that began before midnight is whole), and the server records of its days.
    """

    first: datetime.date | None = None
    last: datetime.date | None = None

    def __post_init__(self) -> None:
        if self.first is not None and self.last is not None and self.first > self.last:
            raise InputError(f"--from {self.first} is after --to {self.last}")

    @property
    def whole(self) -> bool:
        """True when no day was asked for (everything ingested)."""
        return self.first is None and self.last is None

    def widened(self) -> DayRange:
        """The days of events to read: one more day after ``last``."""
        if self.last is None:
            return self
        return DayRange(self.first, self.last + datetime.timedelta(days=1))

    def as_dict(self) -> dict[str, str | None]:
        """``{"from": ISO day or None, "to": ...}`` (``_stage.json``, ``summary.json``)."""
        return {
            "from": self.first.isoformat() if self.first else None,
            "to": self.last.isoformat() if self.last else None,
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any] | None) -> DayRange:
        """The inverse of :meth:`as_dict` (None: the whole range)."""
        if not doc:
            return cls()
        first, last = doc.get("from"), doc.get("to")
        return cls(
            datetime.date.fromisoformat(first) if first else None,
            datetime.date.fromisoformat(last) if last else None,
        )

    def describe(self) -> str | None:
        """How the report names the selection (None for the whole range)."""
        if self.whole:
            return None
        first = self.first.isoformat() if self.first else "the first day"
        last = self.last.isoformat() if self.last else "the last day"
        return f"sessions requested from {first} to {last}"


def parse_day(text: str) -> datetime.date:
    """An ISO day (``YYYY-MM-DD``), for ``--from``/``--to``.

    :raises ValueError: not such a day.
    """
    return datetime.date.fromisoformat(text)


def _tree_bytes(path: str) -> int:
    total = 0
    for root, _, names in os.walk(path):
        for name in names:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                continue
    return total


def local_bytes(paths: Iterable[str]) -> int | None:
    """Total size of the files and directory trees at ``paths`` (missing ones count 0), or
    None when any path is remote (its size is unknown here)."""
    total = 0
    for path in paths:
        if is_remote(path):
            return None
        path = local_path(path)
        if os.path.isdir(path):
            total += _tree_bytes(path)
        elif os.path.isfile(path):
            total += os.path.getsize(path)
    return total


STAGE_NEEDS = {
    "sessionize": ("bronze", "_ingested.json", "ingest"),
    "aggregate": ("silver", "_stage.json", "sessionize"),
    "report": ("gold", "_stage.json", "aggregate"),
}
"""Stage -> (layer, file that exists once its writer ran, the stage to run first)."""


def check_stage(command: str, output: str) -> None:
    """Fail fast when ``command`` reads a layer that was never written under a local output.

    :raises InputError: naming the stage to run first.
    """
    if command not in STAGE_NEEDS or is_remote(output):
        return
    layer, marker, first = STAGE_NEEDS[command]
    if not os.path.isfile(os.path.join(local_path(output), layer, marker)):
        raise InputError(f"no {layer} tables under {output}: run {first} first")


__all__ = [
    "GLOB_SOURCES",
    "SMALL_INPUT_BYTES",
    "SOURCES",
    "STAGE_NEEDS",
    "USAGE_TABLES",
    "DayRange",
    "Inputs",
    "check_stage",
    "check_usage_db",
    "expand",
    "is_remote",
    "local_bytes",
    "local_path",
    "option_of",
    "parse_day",
]
