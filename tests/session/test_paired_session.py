"""``--pairing``: the options refuse a pairing file that cannot be used (damaged, exposed, a
symbolic link, in an unsafe directory), a spent code, and settings that contradict it, in one
line and before anything is sent; ``txdilation pairing show|forget``.

The process test points the pairing at a TCP port that counts connections: a refused file
must leave it at zero (nothing was sent to any mailbox server)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.utils import getProcessOutputAndValue
from twisted.python import usage
from twisted.trial.unittest import SynchronousTestCase, TestCase

from tests.pairing.support import records
from tests.support.harness import LOOPBACK, REPO_ROOT
from tests.test_cli import run_cli
from txdilation.pairing import ratchet
from txdilation.pairing.identity_keys import key_fingerprint
from txdilation.pairing.record import encode
from txdilation.pairing.spent import spend
from txdilation.pairing.store import PairingStore
from txdilation.session.command_line import SessionOptions

MAILBOX = "ws://127.0.0.1:4000/v1"


def pairing_file(directory: Path, mailbox: str = MAILBOX) -> tuple[Path, Any]:
    """A valid pairing file (generation 0) in ``directory``; returns its path and record."""
    path = directory / "peer.pairing"
    record, _ = records(mailbox)
    PairingStore(path).save(record)
    return path, record


def damaged(path: Path, record: Any) -> dict[str, bytes]:
    """Ways a pairing file goes wrong, by name: its bytes."""
    body = json.loads(encode(record))
    good = encode(record)
    return {
        "truncated": good[: len(good) // 2],
        "edited": json.dumps({**body, "current": {**body["current"], "generation": 7}}).encode(),
        "version": json.dumps({**body, "version": 9}).encode(),
        "foreign": b"[wormhole]\ncode = 1\n",
    }


class OptionsTests(SynchronousTestCase):
    def directory(self) -> Path:
        path = Path(self.mktemp())
        path.mkdir()
        return path

    def parse(self, *argv: str) -> SessionOptions:
        options = SessionOptions()
        options.parseOptions(["--mailbox", MAILBOX, *argv])  # type: ignore[no-untyped-call]
        return options

    def refused(self, *argv: str) -> str:
        with self.assertRaises(usage.UsageError) as caught:
            self.parse(*argv)
        message = str(caught.exception)
        self.assertNotIn("\n", message)
        return message

    def test_first_time_needs_a_code(self) -> None:
        """No file yet: a code (or --allocate-code) is needed, and given it parses; TOML
        ``pairing`` works like the option."""
        path = self.directory() / "peer.pairing"
        self.assertIn("needs a wormhole code", self.refused("--pairing", str(path)))
        config = self.parse("--pairing", str(path), "--allocate-code").config
        assert config is not None
        self.assertEqual(config.pairing, str(path))
        toml = path.parent / "session.toml"
        toml.write_text(f'pairing = "{path}"\ncode = "4-x-y"\n')
        config = self.parse("--config", str(toml)).config
        assert config is not None
        self.assertEqual((config.pairing, config.code), (str(path), "4-x-y"))

    def test_existing_pairing_needs_no_code(self) -> None:
        """A pairing that exists: no code needed; one on the command line is refused (a code
        in the TOML file is left, unused: the session warns)."""
        path, _ = pairing_file(self.directory())
        config = self.parse("--pairing", str(path)).config
        assert config is not None and config.code is None
        self.assertIn(
            "no code is needed or accepted", self.refused("--pairing", str(path), "--code", "3-a-b")
        )
        self.assertIn("pairing forget", self.refused("--pairing", str(path), "--allocate-code"))
        toml = path.parent / "session.toml"
        toml.write_text(f'pairing = "{path}"\nallocate-code = true\n')
        self.parse("--config", str(toml))

    def test_bad_files_refused(self) -> None:
        """Wrong permissions, a truncated, edited, foreign file or one of another version: one
        line each, naming the file."""
        path, record = pairing_file(self.directory())
        os.chmod(path, 0o644)
        self.assertIn("mode 0644", self.refused("--pairing", str(path)))
        os.chmod(path, 0o600)
        expected = {
            "truncated": "corrupted",
            "edited": "corrupted or was edited",
            "version": "version 9",
            "foreign": "not a txdilation pairing file",
        }
        for name, data in damaged(path, record).items():
            path.write_bytes(data)
            message = self.refused("--pairing", str(path))
            self.assertIn(expected[name], message, name)
            self.assertIn(str(path), message, name)


class CommandTests(SynchronousTestCase):
    def test_show_and_forget(self) -> None:
        """show prints the peer, the mailbox and the generation's fingerprint, never the
        secret; forget removes the file; both refuse a bad file in one line, exit 1."""
        directory = Path(self.mktemp())
        directory.mkdir()
        path, record = pairing_file(directory)
        PairingStore(path).save(ratchet.stage(record, b"n" * 32))
        code, out, err = run_cli("pairing", "show", str(path))
        self.assertEqual((code, err), (0, ""))
        self.assertIn(record.peer.name, out)
        self.assertIn(record.current.fingerprint, out)
        self.assertIn("pending:     1", out)
        self.assertNotIn(record.current.secret.hex(), out)
        self.assertNotIn(record.key.hex(), out)
        self.assertIn(key_fingerprint(record.peer_key), out)
        code, out, err = run_cli("pairing", "forget", str(path))
        self.assertEqual(code, 0, err)
        self.assertIn("forgot the pairing with side-b", out)
        self.assertFalse(path.exists())
        code, out, err = run_cli("pairing", "show", str(path))
        self.assertEqual((code, out, len(err.splitlines())), (1, "", 1))
        path.write_bytes(b"junk")
        os.chmod(path, 0o600)
        code, _, err = run_cli("pairing", "show", str(path))
        self.assertEqual(code, 1)
        self.assertIn("not a txdilation pairing file", err)


class Counter(Protocol):
    connections = 0

    def connectionMade(self) -> None:
        Counter.connections += 1
        self.transport.abortConnection()


class NothingSentTests(TestCase):
    timeout = 60

    async def counting_mailbox(self) -> str:
        from twisted.internet import reactor

        Counter.connections = 0
        port = await TCP4ServerEndpoint(reactor, 0, interface=LOOPBACK).listen(
            Factory.forProtocol(Counter)
        )
        self.addCleanup(port.stopListening)
        return f"ws://{LOOPBACK}:{port.getHost().port}/v1"

    async def refused(self, mailbox: str, *args: str) -> str:
        """``txdilation run --mailbox MAILBOX ARGS``: exit 2 and one line; returns the line."""
        from twisted.internet import reactor

        argv = ["-m", "txdilation.cli", "run", "--mailbox", mailbox, *args]
        _, err, code = await getProcessOutputAndValue(
            sys.executable, argv, env=dict(os.environ), path=str(REPO_ROOT), reactor=reactor
        )
        lines = err.decode().splitlines()
        self.assertEqual((code, len(lines)), (2, 1), (args, err))
        return lines[0]

    async def test_unsafe_places_and_spent_codes_send_nothing(self) -> None:
        """A pairing file that is a symbolic link (to a good file), one in a directory others
        may write in, and a code this side already paired from (after ``pairing forget``):
        exit 2, one line saying which, and nothing connects to the mailbox server."""
        mailbox = await self.counting_mailbox()
        directory = Path(self.mktemp()).resolve()
        directory.mkdir(parents=True)
        path, _ = pairing_file(directory, mailbox)
        link = directory / "link.pairing"
        link.symlink_to(path)
        self.assertIn("symbolic link", await self.refused(mailbox, "--pairing", str(link)))
        os.chmod(directory, 0o775)
        self.assertIn("has mode 0775", await self.refused(mailbox, "--pairing", str(path)))
        os.chmod(directory, 0o755)
        spend(path, "4-spent-code")
        run_cli("pairing", "forget", str(path))
        line = await self.refused(mailbox, "--pairing", str(path), "--code", "4-spent-code")
        self.assertIn("already paired from the code 4-spent-code", line)
        self.assertIn("--pair-again", line)
        self.assertEqual(Counter.connections, 0)

    async def test_refused_file_sends_nothing(self) -> None:
        """``txdilation run --pairing PATH`` with a damaged or exposed file exits 2 with one
        line on stderr, and nothing connects to the pairing's mailbox server."""
        from twisted.internet import reactor

        Counter.connections = 0
        port = await TCP4ServerEndpoint(reactor, 0, interface=LOOPBACK).listen(
            Factory.forProtocol(Counter)
        )
        self.addCleanup(port.stopListening)
        directory = Path(self.mktemp()).resolve()
        directory.mkdir(parents=True)
        mailbox = f"ws://{LOOPBACK}:{port.getHost().port}/v1"
        path, record = pairing_file(directory, mailbox)
        cases = dict(damaged(path, record))
        cases["exposed"] = encode(record)
        for name, data in cases.items():
            path.write_bytes(data)
            os.chmod(path, 0o644 if name == "exposed" else 0o600)
            argv = ["-m", "txdilation.cli", "run", "--mailbox", mailbox, "--pairing", str(path)]
            _, err, code = await getProcessOutputAndValue(
                sys.executable, argv, env=dict(os.environ), path=str(REPO_ROOT), reactor=reactor
            )
            lines = err.decode().splitlines()
            self.assertEqual((code, len(lines)), (2, 1), (name, err))
            self.assertIn(str(path), lines[0], name)
        self.assertEqual(Counter.connections, 0)
