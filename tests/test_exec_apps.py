"""Real applications, unchanged, under ``txdilation exec`` (fowl's ``fowld`` pairs are in
tests/test_fowl.py, ``FowldForwardingTests``).

- ``GitWithmeTests``: ``git-withme`` hosts a repository and another ``git-withme`` accepts the
  invitation (each one a ``git-withme`` process and the ``fowl`` process it starts, talking
  through the real mailbox server and transit relay on 127.0.0.1): the accepting side clones,
  pushes a commit the host pulls, and pulls one the host pushed. The host runs under ``txdilation
  exec`` against a stock peer, and against a peer under ``txdilation exec`` too; a stock host
  with a txdilation peer as well. Every Python process of an exec'd side proves it ran on
  txdilation; nobody prints a traceback.
- ``WormholeCliTests``: ``wormhole --version`` and a plain ``wormhole send``/``receive`` (no
  Dilation) print exactly what they print without ``txdilation exec``, and exit alike.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.utils import getProcessOutputAndValue
from twisted.trial.unittest import SkipTest, TestCase

from tests.support.apps import AppProcess
from tests.support.execs import exec_prefix, proof_lines
from tests.support.fowld import fowld_environment
from tests.support.harness import RealServersMixin

GIT = shutil.which("git")
GIT_WITHME = shutil.which("git-withme", path=os.path.dirname(sys.executable))
WORMHOLE = shutil.which("wormhole", path=os.path.dirname(sys.executable))


class GitWithmeTests(RealServersMixin, TestCase):
    """git-withme's host and a collaborator: clone, push, pull (see the module docstring)."""

    timeout = 180

    def setUp(self) -> Any:
        if GIT is None or GIT_WITHME is None:
            raise SkipTest("needs git and git-withme (pip install -e '.[dev]')")
        return super().setUp()

    def environment(self, impl: str) -> dict[str, str]:
        """Loopback-confined, the test's relay, a git that knows no one's configuration."""
        env = fowld_environment(impl, f"tcp:127.0.0.1:{self.transit_relay.port}")
        env.update(
            HOME=self.scratch,
            GIT_CONFIG_NOSYSTEM="1",
            # git-withme's bare repository takes git's default branch: ours is "main"
            GIT_CONFIG_COUNT="1",
            GIT_CONFIG_KEY_0="init.defaultBranch",
            GIT_CONFIG_VALUE_0="main",
            GIT_AUTHOR_NAME="host",
            GIT_AUTHOR_EMAIL="host@example.invalid",
            GIT_COMMITTER_NAME="host",
            GIT_COMMITTER_EMAIL="host@example.invalid",
            TERM="xterm",
        )
        return env

    async def git(self, cwd: str, *args: str) -> str:
        assert GIT is not None
        out, err, code = await getProcessOutputAndValue(
            GIT, args, env=self.environment("stock"), path=cwd, reactor=self.reactor
        )
        text = (out + err).decode("utf-8", "replace")
        self.assertEqual(code, 0, f"git {' '.join(args)}: {text}")
        return text

    def start(self, name: str, impl: str, argv: list[str], terminal: bool = False) -> AppProcess:
        assert GIT_WITHME is not None
        argv = [GIT_WITHME, "--mailbox", self.mailbox.url, *argv]
        if impl == "txdilation":
            argv = [*exec_prefix(os.path.join(self.scratch, f"{name}.proof")), *argv]
        proc = AppProcess.start(
            self.reactor, name, argv, self.environment(impl), self.scratch, terminal=terminal
        )
        self.procs.append(proc)
        self.addCleanup(proc.stop, "KILL")
        return proc

    async def collaborate(self, host_impl: str, guest_impl: str) -> None:
        self.scratch = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.scratch, True)
        self.procs: list[AppProcess] = []
        repo, clone = os.path.join(self.scratch, "repo"), os.path.join(self.scratch, "clone")
        os.makedirs(repo)
        await self.git(repo, "init", "-q", "-b", "main")
        Path(repo, "README").write_text("hosted\n")
        await self.git(repo, "add", "README")
        await self.git(repo, "commit", "-q", "-m", "first")
        host = self.start("host", host_impl, ["--repo", repo], terminal=True)
        try:
            await host.wait_for(r"N -- create new peer")
            host.type(b"n")  # a new peer: git-withme starts fowl and shows the invitation
            code = (await host.wait_for(r"accept (\d+-[a-z]+-[a-z]+)")).group(1)
            guest = self.start("guest", guest_impl, ["--repo", clone, "accept", code])
            await guest.wait_for(r"You can now use normal git commands", timeout=90)
            self.assertEqual(Path(clone, "README").read_text(), "hosted\n")

            # push: the guest's commit reaches the host's repository
            Path(clone, "GUEST").write_text("from the guest\n")
            await self.git(clone, "add", "GUEST")
            await self.git(clone, "commit", "-q", "-m", "guest")
            await self.git(clone, "push", "-q", "origin", "main")
            await self.git(repo, "pull", "-q", "gitwithme", "main")
            self.assertEqual(Path(repo, "GUEST").read_text(), "from the guest\n")

            # pull: the host's next commit reaches the guest
            Path(repo, "HOST").write_text("from the host\n")
            await self.git(repo, "add", "HOST")
            await self.git(repo, "commit", "-q", "-m", "host")
            await self.git(repo, "push", "-q", "gitwithme", "main")
            await self.git(clone, "pull", "-q", "origin", "main")
            self.assertEqual(Path(clone, "HOST").read_text(), "from the host\n")

            host.type(b"q")  # the host quits; the guest sees the wormhole close and ends
            await DeferredList([p.ended.addTimeout(60, self.reactor) for p in self.procs])
        except BaseException:
            for proc in self.procs:
                print(proc.tail(), file=sys.stderr)
            raise
        for proc in self.procs:
            self.assertNotIn("Traceback", proc.text, proc.tail())
            self.assertNotIn("Unhandled", proc.text, proc.tail())
            self.assertEqual((proc.exit_code, proc.exit_signal), (0, None), proc.tail())
        for proc in self.procs:
            if (host_impl, guest_impl)[proc is guest] == "txdilation":
                self.check_proof(proc)

    def check_proof(self, proc: AppProcess) -> None:
        """Every Python process of that side, git-withme and the fowl it started, proved it
        dilated through txdilation."""
        lines = proof_lines(os.path.join(self.scratch, f"{proc.name}.proof"))
        [withme] = [line for line in lines if line["pid"] == proc.pid]
        [fowl] = [line for line in lines if line["ppid"] == proc.pid]
        self.assertEqual(len(lines), 2, lines)
        self.assertIn("--repo", withme["argv"])
        self.assertIn("--mailbox", fowl["argv"])  # `python -u -m fowl --mailbox URL`
        for line in lines:
            self.assertTrue(line["took_effect"], line)
            self.assertEqual(line["implementation"], "txdilation", line)

    async def test_host_under_exec_with_a_stock_guest(self) -> None:
        """The host (and the fowl it starts) on txdilation, the guest on stock."""
        await self.collaborate("txdilation", "stock")

    async def test_stock_host_with_a_guest_under_exec(self) -> None:
        """The host on stock, the guest (and its fowl) on txdilation."""
        await self.collaborate("stock", "txdilation")

    async def test_both_under_exec(self) -> None:
        """Both sides, and every fowl, on txdilation."""
        await self.collaborate("txdilation", "txdilation")


class WormholeCliTests(RealServersMixin, TestCase):
    """The ``wormhole`` command without Dilation: exactly as without txdilation."""

    timeout = 120

    def setUp(self) -> Any:
        if WORMHOLE is None:
            raise SkipTest("needs magic-wormhole's wormhole command")
        return super().setUp()

    async def wormhole(self, prefix: list[str], *args: str) -> tuple[str, int]:
        assert WORMHOLE is not None
        argv = [*prefix, WORMHOLE, *args]
        out, err, code = await getProcessOutputAndValue(
            argv[0], argv[1:], env=os.environ, reactor=self.reactor
        )
        return (out + err).decode("utf-8", "replace"), code

    async def test_version(self) -> None:
        """``wormhole --version``: the same output and status."""
        direct = await self.wormhole([], "--version")
        under = await self.wormhole(exec_prefix(), "--version")
        self.assertEqual(under, direct)
        self.assertRegex(direct[0], r"magic-wormhole \d")

    async def test_send_and_receive_a_text(self) -> None:
        """``wormhole send --text`` and ``wormhole receive`` with a given code, once as they
        are and once under ``txdilation exec`` (with proof lines: both on txdilation): the
        same output from each side, status 0."""
        relay = ["--relay-url", self.mailbox.url, "--transit-helper", "tcp:127.0.0.1:1"]
        outcomes = []
        for prefix in ([], exec_prefix(self.mktemp())):
            code = "7-purple-sausages"  # the same (its QR code is printed), free again
            sent = Deferred.fromCoroutine(
                self.wormhole(prefix, *relay, "send", "--code", code, "--text", "hello")
            )
            received = Deferred.fromCoroutine(self.wormhole(prefix, *relay, "receive", code))
            results = await DeferredList([sent, received], fireOnOneErrback=True)
            outcomes.append([r[0] for _, r in results])
            self.assertEqual([r[1] for _, r in results], [0, 0], results)
            if prefix:
                lines = proof_lines(prefix[prefix.index("--proof") + 1])
                self.assertEqual([line["took_effect"] for line in lines], [True, True], lines)
        self.assertEqual(outcomes[1], outcomes[0])
        self.assertIn("hello", outcomes[0][1])
