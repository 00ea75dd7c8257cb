"""What a person meets running sessions as real processes (issue 30): a listener bound to one
interface that the peer can reach, pairing that says what it is doing, a pairing file another
process holds, a stop signal in the first second, help and versions that agree with the
program.

Every process is started as a person types the command (the ``txdilation``,
``txdilation-analytics`` and ``twistd`` console scripts of this environment, or ``python -m``
the same module), everything on 127.0.0.1 through the real mailbox server; stderr must never
hold a traceback, and the exit statuses are those docs/command.md gives (2 usage, 1 failure,
130/143 after SIGINT/SIGTERM)."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.protocol import Factory
from twisted.internet.utils import getProcessOutputAndValue
from twisted.trial.unittest import SynchronousTestCase, TestCase

from tests.pairing.support import records
from tests.session.pairing_support import PairedProcessesMixin
from tests.session.test_processes import ProcessesMixin
from tests.session.test_service import Client, HalfCloseEcho
from tests.support.harness import LOOPBACK, REPO_ROOT, loopback_env
from txdilation.pairing.store import PairingStore
from txdilation.session.child import SessionProcess, run_command, spawn_session, twistd_command

BIN = Path(sys.executable).parent
APPID = "txdilation.test/user-view"


def command(name: str, *argv: str) -> list[str]:
    """A console script of this environment as typed: ``txdilation``, ``twistd``, ..."""
    return [str(BIN / name), *argv]


def without_loopback_settings() -> dict[str, str]:
    """This process's environment without the variables that put the dilation listener and its
    hints on loopback: a child then has only what its command line says."""
    return {k: v for k, v in os.environ.items() if k not in loopback_env()}


def assert_no_traceback(test: Any, text: str, what: str) -> None:
    """``text`` (a process's stderr) holds no traceback and no ``KeyboardInterrupt``."""
    for word in ("Traceback", "KeyboardInterrupt"):
        test.assertNotIn(word, text, f"{what}:\n{text}")


class ListenInterfaceTests(ProcessesMixin, TestCase):
    """``--listen-interface 127.0.0.1`` and nothing else: the hints advertise what the
    listener takes."""

    timeout = 120

    def spawn(self, name: str, argv: list[str], directory: Path | None = None) -> SessionProcess:
        process = spawn_session(
            self.reactor,
            name,
            argv,
            env=without_loopback_settings(),
            path=str(directory) if directory else None,
        )
        self.processes = [*getattr(self, "processes", []), process]
        self.addCleanup(process.terminate, self.reactor, 10.0)
        return process

    async def test_two_sessions_dilate_directly_on_loopback(self) -> None:
        """A (``twistd -n dilation``) and B (``txdilation run``), each given only
        ``--listen-interface 127.0.0.1`` (no hint addresses, no relay): they dilate over a
        direct connection to 127.0.0.1 and forward bytes. Then a forwarded connection is held
        open and A gets SIGINT twice: the first starts the grace period, the second cuts it,
        and twistd's log says "SIGINT again" once, not twice."""
        echo_port = await self.service(Factory.forProtocol(HalfCloseEcho))
        common = ["--mailbox", self.mailbox.url, "--appid", APPID, "--status", "-"]
        common += ["--listen-interface", LOOPBACK]
        directory = Path(self.mktemp()).resolve()
        directory.mkdir(parents=True)
        twistd = twistd_command(["--pidfile", "twistd.pid", "--logfile", "twistd.log"])
        a = self.spawn(
            "A",
            [*twistd, *common, "--allocate-code", "--listen", f"echo=tcp:0:interface={LOOPBACK}"],
            directory,
        )
        code = (await self.within(a.next_event("code"), "A's code"))["code"]
        b_argv = [*run_command(), *common, "--code", code]
        b = self.spawn("B", [*b_argv, "--connect", f"echo=tcp:{LOOPBACK}:{echo_port}"])
        for process in (a, b):
            dilated = await self.within(process.next_event("dilated"), f"{process.name} dilated")
            self.assertEqual(dilated["path"], "direct", process.tail())
            self.assertIn(f"tcp:{LOOPBACK}:", dilated["hint"], process.tail())
        client = Client()
        await self.connect(a, "echo", client)
        client.transport.write(b"over loopback")
        await self.within(b.next_event("subchannel-opened"), "B forwards the connection")

        a.signal("INT")
        await self.within(a.next_event("stopping"), "A's grace period")
        a.signal("INT")
        await self.within(a.ended, "A stopped")
        await self.within(client.lost, "the held connection cut")
        self.assertEqual(a.exit_code, 0, a.tail())  # (twistd dilation: 0 after a stop)
        log = (directory / "twistd.log").read_text()
        self.assertEqual(len(re.findall("SIGINT again", log)), 1, log)
        await self.within(b.ended, "B ended after its peer")
        assert_no_traceback(self, a.stderr + b.stderr + log, "A, B")

    async def test_unreachable_listener_warned_before_the_mailbox(self) -> None:
        """``--listen-interface 127.0.0.1 --hint-addresses 192.0.2.5``: the peer could never
        reach the listener; a one-line warning says so before the mailbox server is
        contacted (192.0.2.5 is never dialled: this side only listens)."""
        argv = [*run_command(), "--mailbox", self.mailbox.url, "--appid", APPID, "--status", "-"]
        argv += ["--listen-interface", LOOPBACK, "--hint-addresses", "192.0.2.5"]
        process = self.spawn("A", [*argv, "--allocate-code"])
        warning = await self.within(process.next_event("warning"), "the warning")
        mailbox = await self.within(process.next_event("mailbox"), "the mailbox")
        self.assertLess(warning["seq"], mailbox["seq"])
        self.assertIn("cannot connect to this side directly", warning["message"])
        self.assertEqual(warning["advice"], "")
        await process.terminate(self.reactor, 10.0)
        lines = [line for line in process.stderr.splitlines() if "warning" in line]
        self.assertEqual(len(lines), 1, process.stderr)
        self.assertIn("advertise 127.0.0.1 too", lines[0])

    async def test_client_timeout_says_its_value(self) -> None:
        """A ``dilation:`` client string with ``timeout=1`` and a code nobody uses
        (``examples/endpoint_fetch.py``, as docs/endpoints.md runs it): one line, exit 1,
        naming the timeout's value (``(timeout=1)``, not ``(timeout=)``)."""
        mailbox = self.mailbox.url.replace(":", "\\:")
        endpoint = f"dilation:subprotocol=http:code=5-nobody-here:timeout=1:mailbox={mailbox}"
        out, err, status = await getProcessOutputAndValue(
            sys.executable,
            ["examples/endpoint_fetch.py", endpoint, "/"],
            env=without_loopback_settings(),
            path=str(REPO_ROOT),
        )
        lines = err.decode().splitlines()
        self.assertEqual((status, out, len(lines)), (1, b"", 1), err)
        self.assertIn("nobody joined with code 5-nobody-here within 1 s (timeout=1)", lines[0])


@pytest.mark.slow
class PairingViewSlowTests(PairedProcessesMixin, TestCase):
    """``txdilation run --pairing``: what its human view says."""

    timeout = 150

    async def test_run_shows_the_pairing(self) -> None:
        """Pair A and B; SIGKILL B and start it again with another ``--mailbox`` on its
        command line: its ``starting`` event names the mailbox kept in the pairing file (the
        one it meets at), and the two human views say what happened: paired, waiting for the
        paired peer, the peer restarted, reconnected (after the peer's restart, after this
        side's), the secret moved on."""
        await self.start_pairing_services()
        a, b = await self.pair()
        self.assertEqual(await self.echo(a, b"paired"), b"paired")
        await self.kill(b)
        seen = len(a.events)
        b = self.side("B", "--mailbox", "ws://127.0.0.1:9/v1")  # (the file's wins)
        starting = await self.within(b.next_event("starting"), "B starting")
        self.assertEqual(starting["mailbox"], self.mailbox.url)
        self.assertEqual(await self.echo(a, b"again"), b"again")
        await self.reconnected(b)
        await self.reconnected(a, seen)
        await self.within(a.next_event("ratchet", after=seen), "A's ratchet")
        await self.within(b.next_event("ratchet"), "B's ratchet")
        await self.stop_all(a, b)  # (then all of stderr has been read)
        peer = r"paired peer \S+"
        for text, pattern in (
            (a.stderr, r"paired with \S+: pairing written to "),
            (a.stderr, peer + r" restarted: what was open with its previous process is closed"),
            (a.stderr, r"reconnected to " + peer + r" after a restart \(down [\d.]+ s\)"),
            (a.stderr, r"pairing with \S+: secret moved to generation \d+"),
            (b.stderr, r"waiting for " + peer + r" \(generation \d+, no code needed\)"),
            (b.stderr, r"reconnected to " + peer + r" after a restart of this side"),
        ):
            self.assertRegex(text, pattern)
        assert_no_traceback(self, a.stderr + b.stderr, "A, B")


class PairingInUseTests(SynchronousTestCase):
    """A pairing file another process holds (its lock): one line before anything starts."""

    def test_refused_before_the_listen_port_opens(self) -> None:
        """This process holds the lock of a valid pairing file; ``txdilation run`` and
        ``twistd -n dilation`` with it exit 1 with one line naming the file, saying to stop
        the other process and to keep the pairing (never to forget it), and print nothing
        else: no ``listening``, no ``starting``, no traceback."""
        directory = Path(self.mktemp()).resolve()
        directory.mkdir()
        path = directory / "peer.pairing"
        PairingStore(path).save(records("ws://127.0.0.1:9/v1")[0])
        holder = PairingStore(path)
        holder.lock()
        self.addCleanup(holder.unlock)
        forward = ["--listen", f"web=tcp:0:interface={LOOPBACK}", "--status", "-"]
        runs = {
            "txdilation run": command("txdilation", "run", "--pairing", str(path), *forward),
            "twistd dilation": command(
                "twistd", "-n", "dilation", "--pairing", str(path), *forward
            ),
        }
        for name, argv in runs.items():
            with self.subTest(command=name):
                done = subprocess.run(
                    argv, capture_output=True, text=True, timeout=60, cwd=directory
                )
                self.assertEqual(done.returncode, 1, done)
                lines = done.stderr.splitlines()
                self.assertEqual(len(lines), 1, done.stderr)
                self.assertTrue(lines[0].startswith(f"{name}: pairing file {path}"), lines[0])
                self.assertIn("in use by another process", lines[0])
                self.assertIn("keep it", lines[0])
                self.assertNotIn("forget", lines[0])
                self.assertEqual(done.stdout, "")  # (no status event: nothing started)
        self.assertTrue(path.exists())


class SilentMailbox:
    """A WebSocket server on 127.0.0.1 that completes the opening handshake and then says
    nothing: a session pointed at it waits for the server's welcome for as long as it runs
    (a refused or silent TCP port would fail it within seconds, racing the signal)."""

    GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

    def __init__(self) -> None:
        self.listener = socket.create_server((LOOPBACK, 0))
        self.url = f"ws://{LOOPBACK}:{self.listener.getsockname()[1]}/v1"
        self.held: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:  # closed
                return
            self.held.append(connection)
            request = b""
            while b"\r\n\r\n" not in request:
                chunk = connection.recv(4096)
                if not chunk:
                    break
                request += chunk
            key = re.search(rb"(?im)^sec-websocket-key:\s*(\S+)", request)
            if key is None:
                continue
            accept = base64.b64encode(hashlib.sha1(key.group(1) + self.GUID).digest())
            connection.sendall(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n"
            )

    def close(self) -> None:
        self.listener.close()
        for connection in self.held:
            connection.close()


def _signal_group_once_started(argv: list[str], delay: float, sig: int) -> tuple[int, str]:
    """Start ``argv`` in a process group of its own, wait until it handles SIGTERM (its
    command installed its handlers: before that Python itself is still starting), then
    ``delay`` seconds more, and send ``sig`` to the whole group (as a terminal's Ctrl-C
    does); returns its exit status and stderr."""
    env = without_loopback_settings()
    process = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not _handles(process.pid, signal.SIGTERM) and process.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"{argv} never handled SIGTERM")
            time.sleep(0.005)
        time.sleep(delay)
        os.killpg(process.pid, sig)
        _, stderr = process.communicate(timeout=90)
        return process.returncode, stderr
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _handles(pid: int, sig: int) -> bool:
    """Whether process ``pid`` has a handler for ``sig`` (``SigCgt`` of its status)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = re.search(r"^SigCgt:\s*([0-9a-f]+)", text, re.MULTILINE)
    return caught is not None and bool(int(caught.group(1), 16) >> (sig - 1) & 1)


@pytest.mark.slow
class EarlySignalSlowTests(SynchronousTestCase):
    """Ctrl-C in the first second of ``txdilation run`` and ``txdilation demo``."""

    def test_ctrl_c_while_starting(self) -> None:
        """SIGINT to the process group (as Ctrl-C) at several moments of the first second or
        two, from the moment the command handles signals: ``txdilation run`` (its mailbox
        server never welcomes it: it keeps waiting) and ``txdilation demo`` each exit 130
        with a line saying they were interrupted, never a traceback; SIGTERM the same with
        143; the demo never exits 1 without a word."""
        mailbox = SilentMailbox()
        self.addCleanup(mailbox.close)
        run = command("txdilation", "run", "--allocate-code", "--mailbox", mailbox.url)
        # 4 GiB: still sending when the last signal comes (1 MiB took 1.8 s in all here, so
        # the demo could end before a signal sent 2 s after its handlers were in place)
        demo = command("txdilation", "demo", "--mib", "4096", "--cuts", "1", "--timeout", "60")
        cases = [(run, d, signal.SIGINT) for d in (0.0, 0.1, 0.3, 0.7, 1.5)]
        cases += [(demo, d, signal.SIGINT) for d in (0.0, 0.3, 1.0, 2.0)]
        cases += [(run, 0.05, signal.SIGTERM), (demo, 0.5, signal.SIGTERM)]
        with ThreadPoolExecutor(max_workers=3) as pool:
            results = list(pool.map(lambda c: _signal_group_once_started(*c), cases))
        for (argv, delay, sig), (status, stderr) in zip(cases, results, strict=True):
            with self.subTest(command=argv[1], delay=delay, signal=sig.name):
                self.assertEqual(status, 128 + sig, stderr)
                assert_no_traceback(self, stderr, f"{argv[1]} after {delay} s")
                self.assertIn(f"interrupted by {sig.name}", stderr)


@pytest.mark.slow
class DemoSummarySlowTests(SynchronousTestCase):
    """``txdilation demo``'s summary stays readable however many cuts."""

    def test_many_cuts_one_summary_line(self) -> None:
        """``txdilation demo --mib 2 --cuts 6``: exit 0; the connections A used (up to seven
        distinct ones) are one short line: at most three, then how many in all."""
        status, stdout, stderr = _run(command("txdilation", "demo", "--mib", "2", "--cuts", "6"))
        self.assertEqual(status, 0, stderr)
        used = [line for line in stdout.splitlines() if "connections used by A" in line]
        self.assertEqual(len(used), 1, stdout)
        self.assertLessEqual(used[0].count(";"), 3, used[0])
        counted = re.search(r"; \.\.\. \((\d+) in all\)$", used[0])
        if counted is not None:  # (how many distinct connections were made is the kernel's)
            self.assertGreater(int(counted.group(1)), 3)
            self.assertEqual(used[0].count("tcp:"), 3, used[0])


class HelpAndVersionTests(SynchronousTestCase):
    """Help and versions agree with the program and with each other."""

    def test_help_format_and_versions(self) -> None:
        """``txdilation run --help`` and ``twistd dilation --help`` have argparse's format, as
        ``demo`` and ``pairing`` do (a ``usage:`` line, ``-h, --help`` listed); run's states
        the exit statuses it really has (130/143), twistd's 0 after a stop; every command
        takes ``--version`` (docs/command.md), the analytics commands too."""
        helps = {
            "run": command("txdilation", "run", "--help"),
            "twistd": command("twistd", "dilation", "--help"),
            "demo": command("txdilation", "demo", "--help"),
            "pairing": command("txdilation", "pairing", "--help"),
        }
        versions = [
            command("txdilation", *args, "--version")
            for args in ((), ("run",), ("demo",), ("pairing",), ("pairing", "show"))
        ]
        versions += [
            command("txdilation", "pairing", "forget", "-V"),
            command("twistd", "dilation", "--version"),
            command("txdilation-analytics", "--version"),
            command("txdilation-analytics", "analyze", "--version"),
            command("txdilation-analytics", "bundle", "-V"),
        ]
        every = [*helps.values(), *versions]
        with ThreadPoolExecutor(max_workers=3) as pool:
            done = list(pool.map(_run, every))
        out = dict(zip(helps, done[: len(helps)], strict=True))
        for name, (status, stdout, stderr) in out.items():
            with self.subTest(help=name):
                self.assertEqual((status, stderr), (0, ""))
                self.assertTrue(stdout.startswith("usage: "), stdout[:200])
                self.assertIn("-h, --help", stdout)
                self.assertIn("-V, --version", stdout)
        flat = {name: " ".join(text.split()) for name, (_, text, _) in out.items()}
        self.assertIn("130 after SIGINT and 143 after SIGTERM", flat["run"])
        self.assertIn("0 after a stop (SIGTERM, SIGINT)", flat["twistd"])
        self.assertTrue(out["twistd"][1].startswith("usage: twistd [options] dilation"))
        for argv, (status, stdout, stderr) in zip(versions, done[len(helps) :], strict=True):
            with self.subTest(version=argv[1:]):
                self.assertEqual((status, stderr), (0, ""))
                self.assertRegex(stdout, r"^txdilation(-analytics)? \d")


def _run(argv: list[str]) -> tuple[int, str, str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    return done.returncode, done.stdout, done.stderr
