"""Every example in examples/ runs as its docstring says, the commands taken from the docstring
and run as written, by ``sh``, in one scratch directory holding a copy of ``examples/``:

- ``echo_one_process.py``: with its own local servers, and against given servers;
- ``echo_two_process.py``: ``serve`` and ``connect`` as two processes;
- ``endpoint_fetch.py``: against ``twistd -n web --listen dilation:...`` (one subprotocol, then
  two on one wormhole), the client connecting through ``clientFromString(reactor,
  "dilation:...")``;
- ``test_echo.py``: the example's own tests, with trial and with pytest.

What is replaced, and nothing else: the public mailbox server and transit relay by this test's
(``RealServersMixin``, in this process, on 127.0.0.1; ``TXDILATION_MAILBOX`` names it where a
command relies on the default) and the example code ``7-guitarist-revenge`` by the one printed.
A ``# -> TEXT`` line under a command is what it must print. ``python`` and ``twistd`` are this
environment's (its bin directory first on PATH); every process inherits
``TXDILATION_LISTEN_INTERFACE``/``TXDILATION_HINT_ADDRESSES=127.0.0.1`` and is ended by the test
(SIGTERM, then SIGKILL), each step bounded in time. docs/api.md's program runs as printed too.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import stat
import sys
from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.utils import getProcessOutputAndValue
from twisted.trial.unittest import TestCase

from tests.support.harness import REPO_ROOT, RealServersMixin
from tests.support.waits import sleep
from txdilation.session.child import SessionProcess, spawn_session

EXAMPLES = REPO_ROOT / "examples"
STEP = 45.0
PUBLIC_MAILBOX = "ws://relay.magic-wormhole.io:4000/v1"
PUBLIC_RELAY = "tcp:transit.magic-wormhole.io:4001"
EXAMPLE_CODE = "7-guitarist-revenge"


def docstring_commands(path: Path) -> list[tuple[str, list[str]]]:
    """The commands in a module's docstring (``python``/``twistd``/``cd`` lines, continuations
    joined, comments dropped), each with the ``# -> TEXT`` lines after it. Fragments written
    with ``...`` are not commands."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    commands: list[tuple[str, list[str]]] = []
    for line in doc.replace("\\\n", " ").splitlines():
        text = line.strip()
        expected = re.match(r"# -> (.*)", text)
        if expected and commands:
            commands[-1][1].append(expected.group(1))
        elif re.match(r"(python|twistd|cd) ", text) and "..." not in text:
            commands.append((" ".join(text.split(" #", 1)[0].split()), []))
    return commands


class ExamplesTests(RealServersMixin, TestCase):
    """The examples, run as their docstrings say."""

    timeout = 150

    def setUp(self) -> Any:
        d = super().setUp()
        self.scratch = Path(self.mktemp()).resolve()
        self.scratch.mkdir(parents=True)
        shutil.copytree(EXAMPLES, self.scratch / "examples")
        return d

    def environment(self) -> dict[str, str]:
        """This process's environment (loopback settings included), this environment's bin
        directory first on PATH, this checkout's ``src`` first on the Python path, this test's
        mailbox server as the default one, unbuffered."""
        path = os.pathsep.join([str(REPO_ROOT / "src"), os.environ.get("PYTHONPATH", "")])
        return {
            **os.environ,
            "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]]),
            "PYTHONPATH": path.rstrip(os.pathsep),
            "PYTHONUNBUFFERED": "1",
            "TXDILATION_MAILBOX": self.mailbox.url,
        }

    def as_here(self, command: str, code: str = EXAMPLE_CODE) -> str:
        """``command`` with the public servers replaced by this test's, and the example code
        by ``code``."""
        command = command.replace(PUBLIC_MAILBOX, self.mailbox.url)
        return command.replace(PUBLIC_RELAY, self.transit_relay.hint).replace(EXAMPLE_CODE, code)

    async def sh(self, command: str) -> tuple[str, str]:
        """Run ``command`` with ``sh`` in the scratch directory to its end (within STEP
        seconds); returns (stdout, stderr), failing with both unless it exits 0."""
        d = getProcessOutputAndValue(
            "/bin/sh",
            ["-c", command],
            env=self.environment(),
            path=str(self.scratch),
            reactor=self.reactor,
        )
        d.addTimeout(STEP, self.reactor)
        out, err, code = await d
        self.assertEqual(code, 0, f"{command}: exit {code}\n{out.decode()}\n{err.decode()}")
        return out.decode(), err.decode()

    def start(self, name: str, command: str) -> SessionProcess:
        """Start ``command`` (``sh -c 'exec COMMAND'``; ended by a cleanup)."""
        process = spawn_session(
            self.reactor,
            name,
            ["/bin/sh", "-c", f"exec {command}"],
            env=self.environment(),
            path=str(self.scratch),
        )
        self.addCleanup(process.terminate, self.reactor, 10.0)
        return process

    async def line(self, process: SessionProcess, pattern: str) -> re.Match[str]:
        """Wait (up to STEP seconds) for a line of ``process``'s output matching ``pattern``."""
        waited = 0.0
        while waited < STEP:
            for line in process.other_output:
                found = re.search(pattern, line)
                if found:
                    return found
            self.assertTrue(
                process.running, f"{process.name} ended:\n{process.tail()}\n{process.other_output}"
            )
            await sleep(0.05, self.reactor)
            waited += 0.05
        output = "\n".join(process.other_output)
        self.fail(f"{process.name}: no line matching {pattern!r}\n{output}\n{process.tail()}")

    async def ended(self, process: SessionProcess) -> int | None:
        d: Deferred[Any] = Deferred()
        process.ended.addBoth(lambda code: d.callback(code) if not d.called else None)
        code: int | None = await d.addTimeout(STEP, self.reactor)
        return code

    def commands(self, name: str, count: int) -> list[tuple[str, list[str]]]:
        commands = docstring_commands(EXAMPLES / name)
        self.assertEqual(len(commands), count, commands)
        return commands

    async def test_echo_one_process(self) -> None:
        """Without --mailbox it starts the real servers on 127.0.0.1 itself, exchanges a code,
        compares verifiers, dilates and echoes over a subchannel; with --mailbox and --relay
        it uses those (the public ones in the docstring: this test's here)."""
        (own, _), (given, _) = self.commands("echo_one_process.py", 2)
        out, _ = await self.sh(self.as_here(own))
        self.assertIn("local mailbox server ws://127.0.0.1:", out)
        self.assertRegex(out, r"wormhole code: \d+-\w+-\w+")
        self.assertIn("verifiers match: True", out)
        self.assertIn(
            "alice got: echo: hello\nalice got: echo: dilated\nalice got: echo: world\n", out
        )
        out, _ = await self.sh(self.as_here(given))
        self.assertNotIn("local mailbox server", out)
        self.assertIn("alice got: echo: hello\nalice got: echo: world\nalice got: bye\n", out)

    async def test_echo_two_processes(self) -> None:
        """'serve' prints a code; 'connect CODE' in another process gets every word echoed;
        both print the same verifier and exit 0 ('serve' once the peer left)."""
        (serve, serve_prints), (connect, connect_prints) = self.commands("echo_two_process.py", 2)
        server = self.start("serve", self.as_here(serve))
        self.assertEqual(serve_prints, [f"wormhole code: {EXAMPLE_CODE}"])
        code = (await self.line(server, r"^wormhole code: (\S+)$")).group(1)
        out, _ = await self.sh(self.as_here(connect, code))
        lines = out.splitlines()
        for expected in connect_prints:
            self.assertIn(expected, lines)
        self.assertEqual(lines[1:], ["echo: hello", "echo: world", "bye"])
        self.assertEqual(await self.ended(server), 0, server.tail())
        verifiers = {line for line in [*server.other_output, *lines] if line.startswith("verifier")}
        self.assertEqual(len(verifiers), 1, verifiers)
        self.assertIn("the peer left", server.other_output)

    async def test_endpoint_fetch_over_twistd_web(self) -> None:
        """``twistd -n web --path ./site --listen dilation:...`` (the default mailbox: this
        test's, by TXDILATION_MAILBOX); endpoint_fetch.py, in another process, fetches a page
        through it with the code from code.txt (owner-only), the body written to stdout as it
        came. Stopped (as a user would), the same directory then serves two subprotocols on
        one wormhole (one code file, two ports), and one fetch with two endpoints (sharing its
        wormhole too) gets a page through each; twistd's log says the code, both subprotocols
        served, the dilation and the requests."""
        site = self.scratch / "site"
        site.mkdir()
        (site / "index.html").write_bytes(b"served by twistd web over a dilated wormhole\n")
        (site / "status.txt").write_bytes(b"all well\n\x00\xff binary too\n")
        (one, _), (fetch_one, _), (two, _), (fetch_two, _) = self.commands("endpoint_fetch.py", 4)
        web = self.start("twistd-web", one)
        await self.line(web, r"serving subprotocol http on the wormhole with code")
        code = (self.scratch / "code.txt").read_text().strip()
        self.assertEqual(stat.S_IMODE((self.scratch / "code.txt").stat().st_mode), 0o600)
        out, err = await self.sh(fetch_one)
        self.assertEqual(out, (site / "index.html").read_text())
        self.assertIn("GET /index.html: HTTP 200", err)
        await self.line(web, r"the peer closed its wormhole: http is served no more")
        log = "\n".join(web.other_output)
        self.assertEqual(log.count("[txdilation.endpoints#info] wormhole starting"), 1, log)
        self.assertIn(f"[txdilation.endpoints#info] wormhole code: {code}", log)
        self.assertIn("wormhole code written to code.txt", log)
        self.assertRegex(
            log, r"\[txdilation\.endpoints#info\] dilated: generation 1, direct connection"
        )
        web.signal("TERM")  # a user stops it (Ctrl-C) before the next command
        await self.ended(web)

        web = self.start("twistd-web-2", two)
        await self.line(web, r"serving subprotocol http-admin on the wormhole with code")
        d = getProcessOutputAndValue(
            "/bin/sh", ["-c", fetch_two], env=self.environment(), path=str(self.scratch)
        )
        out_bytes, err_bytes, status = await d.addTimeout(STEP, self.reactor)
        self.assertEqual(status, 0, err_bytes.decode())
        self.assertEqual(
            out_bytes, (site / "index.html").read_bytes() + (site / "status.txt").read_bytes()
        )
        await self.line(web, r"the peer closed its wormhole: http, http-admin is served no more")
        log = "\n".join(web.other_output)
        self.assertEqual(
            len(re.findall(r'"GET /(index.html|status.txt) HTTP/1.1" 200', log)), 2, log
        )

    async def test_example_tests(self) -> None:
        """``cd examples && python -m twisted.trial test_echo``, and the same with pytest: the
        example's own tests over txdilation.testing pass."""
        (trial, _), (pytest, _) = self.commands("test_echo.py", 2)
        out, _ = await self.sh(trial)
        self.assertIn("PASSED (successes=4)", out)
        out, _ = await self.sh(pytest)
        self.assertIn("4 passed", out)

    async def test_api_doc_sample(self) -> None:
        """The program at the top of docs/api.md runs as printed (its mailbox and relay
        replaced by this test's servers) and echoes its line."""
        doc = (REPO_ROOT / "docs" / "api.md").read_text()
        sample = re.search(r"```python\n(.*?)```", doc, flags=re.S)
        assert sample is not None
        program = sample.group(1)
        for name, value in (("MAILBOX", self.mailbox.url), ("RELAY", self.transit_relay.hint)):
            program, count = re.subn(
                rf'^{name} = "[^"]*"', f'{name} = "{value}"', program, flags=re.M
            )
            self.assertEqual(count, 1, name)
        (self.scratch / "examples" / "api_sample.py").write_text(program)
        out, _ = await self.sh("cd examples && python api_sample.py")
        self.assertEqual(out, "[b'echo: hello', b'bye']\n")
