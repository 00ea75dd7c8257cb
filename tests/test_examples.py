"""Every example in examples/ runs, as a user would run it, as processes on 127.0.0.1:

- ``echo_one_process.py``: with its own local servers, and against this test's servers;
- ``echo_two_process.py``: ``serve`` and ``connect`` as two processes;
- ``endpoint_fetch.py``: against ``twistd -n web --listen dilation:...`` (two subprotocols on
  one wormhole), the client connecting through ``clientFromString(reactor, "dilation:...")``;
- ``test_echo.py``: the example trial test over ``txdilation.testing``.

The real mailbox server and transit relay run in this process (``RealServersMixin``); every
process inherits ``TXDILATION_LISTEN_INTERFACE``/``TXDILATION_HINT_ADDRESSES=127.0.0.1`` and
is ended by the test (SIGTERM, then SIGKILL), each step bounded in time."""

from __future__ import annotations

import os
import re
import stat
import sys
from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater
from twisted.internet.utils import getProcessOutputAndValue
from twisted.trial.unittest import TestCase

from tests.support.harness import REPO_ROOT, RealServersMixin
from txdilation.session.child import SessionProcess, spawn_session

EXAMPLES = REPO_ROOT / "examples"
STEP = 45.0


def escaped(text: str) -> str:
    return text.replace(":", "\\:")


class ExamplesTests(RealServersMixin, TestCase):
    """The examples, run."""

    timeout = 120

    def environment(self) -> dict[str, str]:
        """This process's environment (loopback settings included), with this checkout's
        ``src`` first on the path, unbuffered."""
        path = os.pathsep.join([str(REPO_ROOT / "src"), os.environ.get("PYTHONPATH", "")])
        return {**os.environ, "PYTHONPATH": path.rstrip(os.pathsep), "PYTHONUNBUFFERED": "1"}

    async def run_example(self, *argv: str, cwd: Path = EXAMPLES) -> str:
        """Run ``python ARGV`` to its end (within STEP seconds); returns stdout, and fails
        with everything it printed unless it exits 0."""
        d = getProcessOutputAndValue(
            sys.executable, list(argv), env=self.environment(), path=str(cwd), reactor=self.reactor
        )
        d.addTimeout(STEP, self.reactor)
        out, err, code = await d
        text = out.decode()
        self.assertEqual(code, 0, f"{argv}: exit {code}\n{text}\n{err.decode()}")
        return text

    def spawn(self, name: str, *argv: str, cwd: Path = EXAMPLES) -> SessionProcess:
        """Start ``python ARGV`` (ended by a cleanup); its stdout lines are in other_output."""
        process = spawn_session(
            self.reactor, name, [sys.executable, *argv], env=self.environment(), path=str(cwd)
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
            await deferLater(self.reactor, 0.05, lambda: None)
            waited += 0.05
        output = "\n".join(process.other_output)
        self.fail(f"{process.name}: no line matching {pattern!r}\n{output}\n{process.tail()}")

    async def ended(self, process: SessionProcess) -> int | None:
        d: Deferred[Any] = process.ended
        d.addTimeout(STEP, self.reactor)
        return await d

    async def test_echo_one_process_with_its_own_servers(self) -> None:
        """No --mailbox: it starts the real servers on 127.0.0.1 itself, exchanges a code,
        compares verifiers, dilates and echoes every word over a subchannel."""
        out = await self.run_example("echo_one_process.py", "hello", "dilated")
        self.assertIn("local mailbox server ws://127.0.0.1:", out)
        self.assertRegex(out, r"wormhole code: \d+-\w+-\w+")
        self.assertIn("verifiers match: True", out)
        self.assertIn("alice got: echo: hello\nalice got: echo: dilated\nalice got: bye\n", out)

    async def test_echo_one_process_given_servers(self) -> None:
        """With --mailbox and --relay it uses those (this test's servers)."""
        out = await self.run_example(
            "echo_one_process.py", "--mailbox", self.mailbox.url, "--relay", self.transit_relay.hint
        )
        self.assertNotIn("local mailbox server", out)
        self.assertIn("alice got: echo: world", out)

    async def test_echo_two_processes(self) -> None:
        """'serve' prints a code; 'connect CODE' in another process gets every word echoed;
        both print the same verifier and exit 0 ('serve' once the peer left)."""
        common = ["--mailbox", self.mailbox.url, "--relay", self.transit_relay.hint]
        server = self.spawn("serve", "echo_two_process.py", *common, "serve")
        code = (await self.line(server, r"^wormhole code: (\S+)$")).group(1)
        out = await self.run_example("echo_two_process.py", *common, "connect", code, "one", "two")
        self.assertEqual(out.splitlines()[1:], ["echo: one", "echo: two", "bye"])
        self.assertEqual(await self.ended(server), 0, server.tail())
        verifiers = {
            line
            for line in [*server.other_output, *out.splitlines()]
            if line.startswith("verifier: ")
        }
        self.assertEqual(len(verifiers), 1, verifiers)
        self.assertIn("the peer left", server.other_output)

    async def test_twistd_web_over_dilation(self) -> None:
        """``twistd -n web --path SITE --listen dilation:...`` twice (subprotocols http and
        http-admin, one code file: one wormhole, two ports); endpoint_fetch.py in another
        process fetches a page through each subprotocol with clientFromString("dilation:...")
        and the code (its two endpoints share its wormhole); the code file is owner-only;
        twistd's log says the code, both subprotocols served and the dilation, once."""
        site = Path(self.mktemp()).resolve()
        site.mkdir()
        (site / "index.html").write_text("served by twistd web over a dilated wormhole\n")
        (site / "status.txt").write_text("all well\n")
        code_file = site.parent / "code.txt"
        common = f"mailbox={escaped(self.mailbox.url)}:appid=txdilation.test/web"
        web = self.spawn(
            "twistd-web",
            "-c",
            "from twisted.scripts.twistd import run; run()",
            "-n", "--pidfile=", "web", "--path", str(site),
            "--listen", f"dilation:subprotocol=http:{common}:code-file={code_file}",
            "--listen", f"dilation:subprotocol=http-admin:{common}:code-file={code_file}",
            cwd=site.parent,
        )  # fmt: skip
        await self.line(web, r"serving subprotocol http-admin on the wormhole with code")
        code = code_file.read_text().strip()
        self.assertEqual(stat.S_IMODE(code_file.stat().st_mode), 0o600)
        out = await self.run_example(
            str(EXAMPLES / "endpoint_fetch.py"),
            f"dilation:subprotocol=http:{common}:code={code}", "/index.html",
            f"dilation:subprotocol=http-admin:{common}:code={code}", "/status.txt",
        )  # fmt: skip
        self.assertEqual(
            out,
            "GET /index.html: HTTP 200\nserved by twistd web over a dilated wormhole\n"
            "GET /status.txt: HTTP 200\nall well\n",
        )
        await self.line(web, r"the peer closed its wormhole: http, http-admin is served no more")
        log = "\n".join(web.other_output)
        self.assertEqual(log.count("[txdilation.endpoints#info] wormhole starting"), 1, log)
        self.assertIn(f"[txdilation.endpoints#info] wormhole code: {code}", log)
        self.assertIn(f"wormhole code written to {code_file}", log)
        self.assertRegex(
            log, r"\[txdilation\.endpoints#info\] dilated: generation 1, direct connection"
        )
        self.assertEqual(
            len(re.findall(r'"GET /(index.html|status.txt) HTTP/1.1" 200', log)), 2, log
        )

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
        path = Path(self.mktemp()).resolve()
        path.mkdir()
        (path / "api_sample.py").write_text(program)
        env_path = f"{EXAMPLES}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
        self.patch(os, "environ", {**os.environ, "PYTHONPATH": env_path})
        out = await self.run_example(str(path / "api_sample.py"))
        self.assertEqual(out, "[b'echo: hello', b'bye']\n")

    async def test_example_trial_test(self) -> None:
        """``cd examples && python -m twisted.trial test_echo``: the example's own tests over
        txdilation.testing pass."""
        temp = Path(self.mktemp()).resolve()
        temp.mkdir()
        out = await self.run_example(
            "-m", "twisted.trial", "--temp-directory", str(temp / "_trial_temp"), "test_echo"
        )
        self.assertIn("PASSED (successes=4)", out)
