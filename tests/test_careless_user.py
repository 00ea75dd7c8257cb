"""A careless user's sweep: mistaken invocations of every command, each caught in one line.

Every row of :data:`MISTAKES` is a command as a person types it (``txdilation``,
``txdilation run``, ``twistd -n dilation``, ``twistd -n web --listen 'dilation:...'``, a
``dilation:`` client string given to ``examples/endpoint_fetch.py``, ``txdilation-analytics``),
the exit status it must end with (2: a usage mistake; 1: a failure) and words its one line
must hold. Each runs as a real process with ``TXDILATION_MAILBOX`` pointing at a closed port on
127.0.0.1 (a row that wrongly started would reach nothing else) and must end within
:data:`WITHIN` seconds: every mistake is caught before any network I/O or JVM start. Its
stderr must be exactly one line (no traceback), its stdout empty. The rows run a few at a
time; the next mistake someone finds is one more row.

Placeholders in the arguments: ``{tmp}`` is a directory of this test, holding the files of
:data:`FILES` (TOML settings, pairing files) made in ``setUp``; ``{readable}`` a valid pairing file
others may read."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

from twisted.trial.unittest import SynchronousTestCase

from tests.pairing.support import records
from tests.support.harness import REPO_ROOT
from txdilation.pairing.store import PairingStore

BIN = Path(sys.executable).parent
REFUSED = "ws://127.0.0.1:9/v1"
"""The mailbox server of every row (the discard port: nothing listens there)."""
WITHIN = 60.0
POOL = 4


class Mistake(NamedTuple):
    """One mistaken invocation: the argv, the exit status, words of the one line, and extra
    environment variables."""

    argv: tuple[str, ...]
    status: int
    words: str
    env: tuple[tuple[str, str], ...] = ()


def txdilation(
    *argv: str, status: int = 2, words: str, env: dict[str, str] | None = None
) -> Mistake:
    return Mistake(("txdilation", *argv), status, words, tuple((env or {}).items()))


def run(*argv: str, words: str, env: dict[str, str] | None = None) -> Mistake:
    return txdilation("run", *argv, words=words, env=env)


def twistd(*argv: str, words: str) -> Mistake:
    return Mistake(("twistd", "-n", "dilation", *argv), 2, words)


def web(endpoint: str, words: str) -> Mistake:
    """``twistd -n web --listen ENDPOINT``: a ``dilation:`` server string."""
    return Mistake(("twistd", "-n", "web", "--path", "{tmp}", "--listen", endpoint), 2, words)


def fetch(endpoint: str, words: str, status: int = 2) -> Mistake:
    """``python examples/endpoint_fetch.py ENDPOINT /``: a ``dilation:`` client string."""
    return Mistake(("python", "examples/endpoint_fetch.py", endpoint, "/"), status, words)


def analytics(*argv: str, words: str) -> Mistake:
    return Mistake(("txdilation-analytics", *argv), 2, words)


FILES = {
    "unknown-key.toml": 'mailbx = "ws://127.0.0.1:9/v1"\nallocate-code = true\n',
    "not.toml": "allocate-code = [true\n",
    "wrong-type.toml": 'allocate-code = true\nping-interval = "often"\n',
    "bad-table.toml": "allocate-code = true\n[listen]\nweb = 8080\n",
    "bad-endpoint.toml": 'allocate-code = true\n[connect]\nweb = "tcp:127.0.0.1"\n',
    "junk.pairing": "not a pairing file\n",
}

ALLOCATE = "--allocate-code"

MISTAKES: tuple[Mistake, ...] = (
    # --- txdilation ---
    txdilation(words="the following arguments are required"),
    txdilation("serve", words="invalid choice: 'serve'"),
    txdilation("demo", "--verbose", words="unrecognized arguments: --verbose"),
    txdilation("demo", "--mib", "0", words="expected a positive whole number, not '0'"),
    txdilation("demo", "--mib", "lots", words="expected a positive whole number, not 'lots'"),
    txdilation("demo", "--cuts", "-1", words="a whole number, 0 or more"),
    txdilation("demo", "--timeout", "0", words="positive number of seconds"),
    txdilation("demo", "--timeout", "inf", words="positive number of seconds"),
    txdilation("demo", "now", words="unrecognized arguments: now"),
    txdilation("pairing", words="the following arguments are required"),
    txdilation("pairing", "show", words="the following arguments are required: PATH"),
    txdilation("pairing", "eat", "x", words="invalid choice: 'eat'"),
    txdilation("pairing", "show", "{tmp}/none.pairing", status=1, words="cannot open it"),
    txdilation("pairing", "forget", "{tmp}/none.pairing", status=1, words="does not exist"),
    txdilation("pairing", "show", "{tmp}/junk.pairing", status=1, words="{tmp}/junk.pairing"),
    # --- txdilation run: the code ---
    run(words="give a wormhole code (--code) or ask for one (--allocate-code)"),
    run("--code", "nonsense", words="'nonsense' is not a wormhole code"),
    run("--code", "7", words="a code looks like 7-guitarist-revenge"),
    run("--code", "7-guitarist revenge", words="is not a wormhole code"),
    run("--code", "7-a-b", ALLOCATE, words="either a code or allocate-code, not both"),
    run("--code", words="option --code requires argument"),
    # --- forwards ---
    run(ALLOCATE, "--listen", "web", words="expected NAME=ENDPOINT"),
    run(ALLOCATE, "--listen", "web=tcp:99999", words="port 99999 is not a port number"),
    run(ALLOCATE, "--listen", "web=tcp:-1", words="port -1 is not a port number"),
    run(ALLOCATE, "--listen", "web=tcp:http", words="'http' is not a number"),
    run(ALLOCATE, "--listen", "web=tcp", words="its port is missing"),
    run(ALLOCATE, "--listen", "=tcp:8080", words="subprotocol name ''"),
    run(ALLOCATE, "--listen", "web=", words="the endpoint string is empty"),
    run(ALLOCATE, "--listen", "web=nosuch:8080", words="Unknown endpoint type: 'nosuch'"),
    run(ALLOCATE, "--listen", "web=unix:", words="the socket path is empty"),
    run(ALLOCATE, "--listen", "web=ssl:8443", words="a file it names cannot be read"),
    run(
        ALLOCATE,
        "--listen",
        "web=tcp:8080",
        "--listen",
        "web=tcp:8081",
        words="--listen web given twice",
    ),
    run(ALLOCATE, "--connect", "web=tcp:127.0.0.1", words="its port is missing"),
    run(ALLOCATE, "--connect", "web=tcp", words="its host is missing"),
    run(ALLOCATE, "--connect", "web=tcp:127.0.0.1:0", words="port 0 is not a port number (1"),
    run(ALLOCATE, "--connect", "web=tcp:127.0.0.1:99999", words="port 99999 is not a port"),
    run(ALLOCATE, "--connect", "web=unix:", words="the socket path is empty"),
    # --- servers and timings ---
    run(ALLOCATE, "--mailbox", "http://relay.example/v1", words="starts with ws:// or wss://"),
    run(ALLOCATE, "--mailbox", "ws://", words="has no host"),
    run(ALLOCATE, "--mailbox", "ws://relay.example:0/v1", words="port 0 is not a port"),
    run(ALLOCATE, "--relay", "relay.example:4001", words="unknown relay location"),
    run(ALLOCATE, "--ping-interval", "often", words="--ping-interval: expected a number"),
    run(ALLOCATE, "--ping-interval", "0", words="ping-interval must be a positive number"),
    run(ALLOCATE, "--drain-timeout", "-1", words="drain-timeout must be a non-negative"),
    run(ALLOCATE, "--close-timeout", "0", words="close-timeout must be a positive"),
    run(ALLOCATE, "--log-level", "loud", words="log-level must be one of"),
    # --- Dilation's own settings ---
    run(ALLOCATE, "--max-unacked-bytes", "16Mb", words="'16Mb' is ambiguous"),
    run(ALLOCATE, "--max-record-size", "lots", words="expected a number of bytes"),
    run(ALLOCATE, "--max-buffered-inbound-bytes", "0", words="positive number of bytes"),
    run(ALLOCATE, "--listen-port", "70000", words="expected a port number (0 to 65535)"),
    run(ALLOCATE, "--hint-port", "0", words="expected a port number (1 to 65535)"),
    run(ALLOCATE, "--listen-interface", "localhost", words="expected an IP address"),
    run(ALLOCATE, "--listen-interface", "192.0.2.77", words="not an address of this host"),
    run(ALLOCATE, "--hint-addresses", ",", words="one or more addresses"),
    run(ALLOCATE, "--punch", "maybe", words="expected on or off"),
    run(ALLOCATE, "--handshake-timeout", "0", words="a positive number of seconds"),
    run(ALLOCATE, "--peer-timeout", "-5", words="a non-negative number of seconds"),
    # --- files ---
    run(ALLOCATE, "--status", "{tmp}/no/status.jsonl", words="does not exist"),
    run(ALLOCATE, "--events", "{tmp}/no/events.jsonl", words="does not exist"),
    run("--config", "{tmp}/none.toml", words="cannot read config file"),
    run("--config", "{tmp}/unknown-key.toml", words="(did you mean mailbox?)"),
    run("--config", "{tmp}/not.toml", words="is not valid TOML"),
    run("--config", "{tmp}/wrong-type.toml", words="ping-interval must be int or float"),
    run("--config", "{tmp}/bad-table.toml", words="[listen] must map names to endpoint"),
    run("--config", "{tmp}/bad-endpoint.toml", words="its port is missing"),
    run("--pairing", "{tmp}/no/peer.pairing", ALLOCATE, words="does not exist"),
    run("--pairing", "{tmp}/new.pairing", words="the first meeting needs a wormhole code"),
    run("--pairing", "{readable}", words="has mode 0644"),
    run("--pairing", "{tmp}/junk.pairing", words="{tmp}/junk.pairing"),
    # --- the command line itself, the environment ---
    run(ALLOCATE, "now", words="unexpected argument 'now'"),
    run("--alocate-code", words="option --alocate-code not recognized"),
    run(ALLOCATE, words="TXDILATION_LOG_LEVEL", env={"TXDILATION_LOG_LEVEL": "loud"}),
    run(ALLOCATE, words="TXDILATION_MAX_RECORD_SIZE", env={"TXDILATION_MAX_RECORD_SIZE": "big"}),
    # --- twistd dilation ---
    twistd(words="give a wormhole code"),
    twistd("--code", "nonsense", words="is not a wormhole code"),
    twistd(ALLOCATE, "--listen", "web=tcp:99999", words="port 99999 is not a port number"),
    twistd(ALLOCATE, "--max-unacked-bytes", "4mb", words="is ambiguous"),
    twistd("--bogus", words="option --bogus not recognized"),
    # --- dilation: server strings (twistd web) ---
    web("dilation:subprotocol=http:code=nonsense", "'nonsense' is not a wormhole code"),
    web("dilation:code=1-a-b", "subprotocol=NAME is required"),
    web("dilation:http", "arguments are key=value"),
    web("dilation:subprotocol=http:mailbx=ws\\://h/v1", "(did you mean mailbox?)"),
    web("dilation:subprotocol=http:mailbox=http\\://h/v1", "starts with ws:// or wss://"),
    web("dilation:subprotocol=http:relay=relay.example", "dilation: relay:"),
    web("dilation:subprotocol=http:ping-interval=soon", "ping-interval must be a positive"),
    web("dilation:subprotocol=http:no-listen=perhaps", "no-listen must be yes or no"),
    web("dilation:subprotocol=http:status={tmp}/no/s.jsonl", "status={tmp}/no/s.jsonl"),
    web("dilation:subprotocol=http:pairing={tmp}/no/p.pairing", "its directory does not exist"),
    # --- dilation: client strings ---
    fetch("dilation:subprotocol=http:code=nonsense", "'nonsense' is not a wormhole code"),
    fetch("dilation:subprotocol=http:code=5-a-b:timeout=soon", "timeout must be a positive"),
    fetch("tcp:127.0.0.1:80", "is not a 'dilation:' endpoint string"),
    fetch(
        "dilation:subprotocol=http:code=5-a-b:timeout=30",
        "cannot reach the mailbox server: Connection was refused by other side: 111: "
        "Connection refused; check mailbox=",
        status=1,
    ),
    # --- txdilation-analytics ---
    analytics(words="the following arguments are required: COMMAND"),
    analytics("bogus", words="invalid choice: 'bogus'"),
    analytics("analyze", words="the following arguments are required: --output"),
    analytics("analyze", "--events", "{tmp}/none*.jsonl", "--output", "{tmp}/a", words="no file"),
    analytics("synth", "--sessions", "0", "--output", "{tmp}/s", words="must be positive"),
    analytics("synth", "--sessions", "abc", "--output", "{tmp}/s", words="positive whole number"),
    analytics(
        "synth",
        "--sessions",
        "5",
        "--corrupt-rate",
        "2",
        "--output",
        "{tmp}/s",
        words="expected a fraction",
    ),
    analytics("sessionize", "--from", "2026-13-01", "--output", "{tmp}/a", words="YYYY-MM-DD"),
    analytics("analyze", "--conf", "novalue", "--output", "{tmp}/a", words="expected KEY=VALUE"),
    analytics("report", "--output", "{tmp}/empty", words="no gold tables under"),
)


class CarelessUserTests(SynchronousTestCase):
    """The sweep of :data:`MISTAKES` (see the module docstring)."""

    def setUp(self) -> None:
        self.tmp = Path(self.mktemp()).resolve()
        self.tmp.mkdir(parents=True)
        (self.tmp / "empty").mkdir()
        for name, text in FILES.items():
            (self.tmp / name).write_text(text)
        os.chmod(self.tmp / "junk.pairing", 0o600)
        readable = self.tmp / "readable.pairing"
        PairingStore(readable).save(records(REFUSED)[0])
        os.chmod(readable, 0o644)
        self.places = {"tmp": str(self.tmp), "readable": str(readable)}

    def invoke(self, mistake: Mistake) -> subprocess.CompletedProcess[str]:
        """Run one row as a process (the console script, or this Python for ``python``)."""
        argv = [part.format(**self.places) for part in mistake.argv]
        program = sys.executable if argv[0] == "python" else str(BIN / argv[0])
        env = {k: v for k, v in os.environ.items() if not k.startswith("TXDILATION_")}
        env.update({"TXDILATION_MAILBOX": REFUSED, **dict(mistake.env)})
        return subprocess.run(
            [program, *argv[1:]],
            capture_output=True,
            text=True,
            timeout=WITHIN,
            env=env,
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
        )

    def test_every_mistake_is_one_line(self) -> None:
        """At least 60 mistakes across the commands: each ends with its exit status, one line
        on stderr holding its words (and no traceback), nothing on stdout; all the failures
        are listed at once."""
        self.assertGreaterEqual(len(MISTAKES), 60)
        self.assertEqual(len(set(MISTAKES)), len(MISTAKES), "a row given twice")
        with ThreadPoolExecutor(max_workers=POOL) as pool:
            done = list(pool.map(self.invoke, MISTAKES))
        wrong = []
        for mistake, result in zip(MISTAKES, done, strict=True):
            lines = result.stderr.splitlines()
            words = mistake.words.format(**self.places)
            if (
                result.returncode != mistake.status
                or len(lines) != 1
                or words not in lines[0]
                or "Traceback" in result.stderr
                or result.stdout
            ):
                wrong.append(
                    f"{' '.join(mistake.argv)}: exit {result.returncode} (expected "
                    f"{mistake.status}), wanted {words!r} in one line; stderr:\n"
                    f"{result.stderr[-1500:]}stdout:\n{result.stdout[-500:]}"
                )
        self.assertEqual(wrong, [], f"{len(wrong)} of {len(MISTAKES)} rows:\n" + "\n".join(wrong))
