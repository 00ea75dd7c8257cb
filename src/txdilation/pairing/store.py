"""Pairing files on disk: checked reads, atomic durable writes, one process per file.

Layer: pairing I/O (files only: no network). A :class:`PairingStore` owns one pairing file:

- :meth:`PairingStore.load` refuses, with one line, a file that is not a regular file, that
  others may read or write (any group/other permission bit), that another user owns, or that
  :func:`~txdilation.pairing.record.decode` refuses (not a pairing file, another version,
  corrupted or edited);
- :meth:`PairingStore.save` writes a new temporary file in the same directory (mode 0600, so the
  secret is never readable by others, not even for a moment), ``fsync``\\ s it, renames it over
  the file and ``fsync``\\ s the directory: after ``save`` returns the record survives a crash or
  a power loss, and a crash during ``save`` leaves the old file or the new one, never a mix;
- :meth:`PairingStore.lock` takes an exclusive ``flock`` on ``PATH.lock`` for the process's
  lifetime, so a second process using the same pairing on this host is refused (the kernel
  releases it when the process dies, even by SIGKILL);
- :func:`forget` removes the file and its lock file.

Invariants: nothing here ever writes a secret to a file others may read; every refusal is a
:class:`~txdilation.pairing.errors.PairingFileError` with a one-line message naming the path.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import IO

from txdilation.pairing.errors import PairingFileError, PairingInUse, UnsafePairingFile
from txdilation.pairing.record import PairingRecord, decode, encode

__all__ = ["PairingStore", "check_file", "forget"]

try:  # pragma: no cover (not on every platform)
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]


def _where(path: Path) -> str:
    return f"pairing file {path}"


def check_file(path: Path) -> None:
    """Refuse a pairing file others could read or change.

    :raises UnsafePairingFile: not a regular file, a group/other permission bit set, or owned
        by another user than this process's effective user.
    :raises PairingFileError: when it cannot be examined (the OS error in words).
    """
    try:
        info = path.lstat()
    except OSError as e:
        raise PairingFileError(f"{_where(path)}: cannot read it: {e.strerror or e}") from None
    if not stat.S_ISREG(info.st_mode):
        raise UnsafePairingFile(f"{_where(path)} is not a regular file")
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        raise UnsafePairingFile(
            f"{_where(path)} has mode {mode:04o}: others may read the pairing's secret; "
            f"run 'chmod 600 {path}' if only you could have changed it, else forget it and "
            "pair again"
        )
    euid = os.geteuid()
    if info.st_uid != euid:
        raise UnsafePairingFile(
            f"{_where(path)} belongs to uid {info.st_uid}, not to this process's user (uid {euid})"
        )


class PairingStore:
    """One pairing file (see the module docstring).

    :param path: the file.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock: IO[bytes] | None = None

    def exists(self) -> bool:
        """True when something is at the path (even a broken file: :meth:`load` says what)."""
        return os.path.lexists(self.path)

    def load(self) -> PairingRecord:
        """Read and check the file.

        :raises PairingFileError: naming the path and what is wrong (see :func:`check_file`
            and :func:`~txdilation.pairing.record.decode`).
        """
        check_file(self.path)
        try:
            data = self.path.read_bytes()
        except OSError as e:
            raise PairingFileError(
                f"{_where(self.path)}: cannot read it: {e.strerror or e}"
            ) from None
        return decode(data, _where(self.path))

    def save(self, record: PairingRecord) -> None:
        """Write ``record`` atomically and durably (see the module docstring).

        :raises PairingFileError: when it cannot be written (the OS error in words).
        """
        directory = self.path.parent
        temporary = directory / f".{self.path.name}.{os.getpid()}.tmp"
        data = encode(record)
        try:
            with contextlib.suppress(FileNotFoundError):
                temporary.unlink()
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temporary, self.path)
            _fsync_directory(directory)
        except OSError as e:
            with contextlib.suppress(OSError):
                temporary.unlink()
            raise PairingFileError(
                f"{_where(self.path)}: cannot write it: {e.strerror or e}"
            ) from None

    def lock(self) -> None:
        """Hold ``PATH.lock`` exclusively until :meth:`unlock` or the process ends.

        :raises PairingInUse: when another process holds it.
        :raises PairingFileError: when the lock file cannot be made.
        """
        if self._lock is not None or fcntl is None:
            return
        lock_path = self.path.with_name(self.path.name + ".lock")
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as e:
            raise PairingFileError(
                f"{_where(self.path)}: cannot make its lock file {lock_path}: {e.strerror or e}"
            ) from None
        handle = os.fdopen(fd, "r+b")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            raise PairingInUse(
                f"{_where(self.path)} is in use by another process on this host (one process "
                "per pairing)"
            ) from None
        self._lock = handle

    def unlock(self) -> None:
        """Release the lock (idempotent)."""
        handle, self._lock = self._lock, None
        if handle is not None:
            handle.close()


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover (a directory we just wrote in)
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover (some file systems refuse fsync on directories)
        pass
    finally:
        os.close(fd)


def forget(path: str | os.PathLike[str]) -> PairingRecord | None:
    """Remove a pairing file and its lock file.

    :returns: the record that was there (None when the file could not be read as one: it is
        removed all the same, as long as it is a regular file).
    :raises PairingFileError: when there is no file, it is not a regular file, or another
        process uses it.
    """
    store = PairingStore(path)
    if not store.exists():
        raise PairingFileError(f"{_where(store.path)} does not exist")
    if not store.path.is_file() or store.path.is_symlink():
        raise PairingFileError(f"{_where(store.path)} is not a regular file: not removed")
    store.lock()
    try:
        try:
            record: PairingRecord | None = store.load()
        except PairingFileError:
            record = None
        store.path.unlink()
        with contextlib.suppress(FileNotFoundError):
            store.path.with_name(store.path.name + ".lock").unlink()
        _fsync_directory(store.path.parent)
    finally:
        store.unlock()
    return record
