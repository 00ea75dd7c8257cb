"""Pairing files on disk: written 0600 and atomically, refused when others may read them or
another user owns them, one process per file, forgotten completely."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from twisted.trial.unittest import SynchronousTestCase

from tests.pairing.support import records
from txdilation.pairing.errors import PairingFileError, PairingInUse, UnsafePairingFile
from txdilation.pairing.store import PairingStore, forget


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
        """A missing file: one line saying it cannot be read."""
        with self.assertRaises(PairingFileError) as caught:
            PairingStore(self.path()).load()
        self.assertIn("cannot read it", str(caught.exception))

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
