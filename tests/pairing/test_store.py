"""Pairing files on disk: written 0600 and atomically, refused when others may read them or
another user owns them, when they are symbolic links (the lock file too) or sit in a directory
others may write in; one process per file, locked before it is read; forgotten completely,
the spent codes kept."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from twisted.trial.unittest import SynchronousTestCase

from tests.pairing.support import records
from txdilation.pairing.keeper import RecordKeeper
from txdilation.pairing.pairing_errors import PairingFileError, PairingInUse, UnsafePairingFile
from txdilation.pairing.spent import is_spent, spend, spent_path
from txdilation.pairing.store import MAX_FILE_SIZE, PairingStore, forget


class StoreTests(SynchronousTestCase):
    def path(self) -> Path:
        directory = Path(self.mktemp())
        directory.mkdir()
        return directory / "peer.pairing"

    def test_save_load_mode(self) -> None:
        """A saved record loads back; the file has mode 0600 and no temporary file is left."""
        path = self.path()
        store = PairingStore(path)
        record, _ = records()
        store.save(record)
        self.assertEqual(store.load(), record)
        self.assertEqual(stat.S_IMODE(path.stat().st_mode), 0o600)
        self.assertEqual(sorted(p.name for p in path.parent.iterdir()), ["peer.pairing"])

    def test_permissions_refused(self) -> None:
        """Group or other bits set: refused in one line naming the mode and the fix."""
        path = self.path()
        PairingStore(path).save(records()[0])
        for mode in (0o640, 0o604, 0o660):
            os.chmod(path, mode)
            with self.assertRaises(UnsafePairingFile) as caught:
                PairingStore(path).load()
            self.assertIn(f"mode {mode:04o}", str(caught.exception))
            self.assertIn("chmod 600", str(caught.exception))

    def test_not_a_regular_file(self) -> None:
        """A directory or a symbolic link at the path is refused."""
        path = self.path()
        path.mkdir()
        self.assertRaises(UnsafePairingFile, PairingStore(path).load)
        link = path.parent / "link.pairing"
        link.symlink_to(path)
        self.assertRaises(UnsafePairingFile, PairingStore(link).load)

    def test_missing(self) -> None:
        """A missing file: one line saying it cannot be opened."""
        with self.assertRaises(PairingFileError) as caught:
            PairingStore(self.path()).load()
        self.assertIn("cannot open it: No such file", str(caught.exception))

    def test_symbolic_links_refused(self) -> None:
        """A pairing file, or its lock file, that is a symbolic link (to a good file) is
        refused with one line saying so; nothing is written through it."""
        path = self.path()
        target = path.parent / "real.pairing"
        PairingStore(target).save(records()[0])
        path.symlink_to(target)
        with self.assertRaises(UnsafePairingFile) as caught:
            PairingStore(path).load()
        self.assertIn("is a symbolic link", str(caught.exception))
        self.assertNotIn("\n", str(caught.exception))
        other = path.parent / "other.pairing"
        (path.parent / "other.pairing.lock").symlink_to(target)
        before = target.read_bytes()
        with self.assertRaises(UnsafePairingFile) as caught:
            PairingStore(other).lock()
        self.assertIn("lock file", str(caught.exception))
        self.assertEqual(target.read_bytes(), before)

    def test_unsafe_directories_refused(self) -> None:
        """A directory group or others may write in is refused (one line naming it and the
        fix), unless sticky (as /tmp); so is a directory another user owns."""
        path = self.path()
        PairingStore(path).save(records()[0])
        for mode in (0o775, 0o757):
            os.chmod(path.parent, mode)
            with self.assertRaises(UnsafePairingFile) as caught:
                PairingStore(path).load()
            self.assertIn(f"directory {path.parent} has mode {mode:04o}", str(caught.exception))
            self.assertRaises(UnsafePairingFile, PairingStore(path).save, records()[0])
        os.chmod(path.parent, 0o1777)
        PairingStore(path).load()
        os.chmod(path.parent, 0o755)
        if os.geteuid() == 0:
            os.chown(path.parent, 65534, -1)
            with self.assertRaises(UnsafePairingFile) as caught:
                PairingStore(path).load()
            self.assertIn("belongs to uid 65534", str(caught.exception))
            os.chown(path.parent, 0, -1)

    def test_oversized_and_fifo(self) -> None:
        """A file over the size bound is refused unread past it; a FIFO at the path is refused
        at once (not waited on)."""
        path = self.path()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, b" " * (MAX_FILE_SIZE + 10))
        os.close(fd)
        with self.assertRaises(PairingFileError) as caught:
            PairingStore(path).load()
        self.assertIn("over", str(caught.exception))
        path.unlink()
        os.mkfifo(path, 0o600)
        self.assertRaises(UnsafePairingFile, PairingStore(path).load)

    def test_locked_before_loaded(self) -> None:
        """A second keeper on a file another holds is refused before it reads anything, so it
        never writes back what it read: the first one's later write stands."""
        from twisted.internet.task import Clock

        path = self.path()
        record, _ = records()
        PairingStore(path).save(record)
        first = RecordKeeper(PairingStore(path), Clock(), None)
        self.assertEqual(first.begin().counter, record.counter + 1)
        self.addCleanup(first.store.unlock)
        second = RecordKeeper(PairingStore(path), Clock(), None)
        self.assertRaises(PairingInUse, second.begin)
        self.assertIsNone(second.record)
        first.confirm()
        self.assertEqual(PairingStore(path).load().counter, record.counter + 1)

    def test_spent_codes(self) -> None:
        """A spent code is remembered (salted scrypt, never the code itself, mode 0600) next to
        the pairing file, across forget; other codes are not spent."""
        path = self.path()
        self.assertFalse(is_spent(path, "7-x-y"))
        spend(path, "7-x-y")
        self.assertTrue(is_spent(path, "7-x-y"))
        self.assertFalse(is_spent(path, "8-x-y"))
        self.assertNotIn(b"7-x-y", spent_path(path).read_bytes())
        self.assertEqual(stat.S_IMODE(spent_path(path).stat().st_mode), 0o600)
        PairingStore(path).save(records()[0])
        forget(path)
        self.assertTrue(is_spent(path, "7-x-y"))

    def test_one_process_per_file(self) -> None:
        """A second lock on the same file is refused until the first is released."""
        path = self.path()
        first, second = PairingStore(path), PairingStore(path)
        first.lock()
        self.addCleanup(first.unlock)
        self.assertRaises(PairingInUse, second.lock)
        first.unlock()
        second.lock()
        second.unlock()

    def test_forget(self) -> None:
        """forget removes the file and its lock file and returns the record; a second forget
        says there is nothing."""
        path = self.path()
        store = PairingStore(path)
        record, _ = records()
        store.save(record)
        store.lock()
        store.unlock()
        self.assertEqual(forget(path), record)
        self.assertEqual(list(path.parent.iterdir()), [])
        self.assertRaises(PairingFileError, forget, path)
