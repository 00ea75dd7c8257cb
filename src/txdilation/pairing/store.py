r"""Pairing files on disk: checked reads, atomic durable writes, one process per file.

Layer: pairing I/O (files only: no network). A :class:`PairingStore` owns one pairing file:
opened with ``O_NOFOLLOW`` and judged by ``fstat`` on the descriptor (links, non-regular files,
files others may read or write or own, unsafe directories refused);
:meth:`PairingStore.lock` holds an exclusive ``flock`` on ``PATH.lock`` for the process's life
(taken before loading); :meth:`PairingStore.save` writes a temporary file, ``fsync``\ s it,
renames it over and ``fsync``\ s the directory; :func:`forget` removes both files (the spent
codes stay: :mod:`.spent`). In full: docs/module-notes.md.

Invariants: nothing here ever writes a secret to a file others may read; a crash leaves the
old file or the new one, never a mix; every refusal is a
:class:`~txdilation.pairing.pairing_errors.PairingFileError` with a one-line message naming the
path.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path
from typing import IO, Final

from txdilation.pairing.pairing_errors import PairingFileError, PairingInUse, UnsafePairingFile
from txdilation.pairing.record import PairingRecord, decode, encode

__all__ = [
    "MAX_FILE_SIZE",
    "PairingStore",
    "check_directory",
    "check_file",
    "forget",
    "open_checked",
]

try:  # pragma: no cover (not on every platform)
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

MAX_FILE_SIZE: Final = 64 * 1024
"""A pairing file is about 1.5 KB; anything over this is refused unread."""

_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)


def _where(path: Path) -> str:
    return f"pairing file {path}"


def _oserror(what: str, e: OSError) -> PairingFileError:
    return PairingFileError(f"{what}: {e.strerror or e}")


def check_directory(path: Path) -> None:
    """Refuse to keep a pairing in a directory others could change.

    :raises UnsafePairingFile: the directory is writable by group or others (and not sticky),
        or belongs to another user than this process's or root.
    """
    directory = path.parent
    try:
        info = directory.stat()
    except OSError as e:
        raise _oserror(f"{_where(path)}: directory {directory}", e) from None
    euid = os.geteuid()
    if info.st_uid not in (euid, 0):
        raise UnsafePairingFile(
            f"{_where(path)}: directory {directory} belongs to uid {info.st_uid}, not to this "
            f"process's user (uid {euid}): keep pairing files in a directory of your own"
        )
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o022 and not mode & stat.S_ISVTX:
        raise UnsafePairingFile(
            f"{_where(path)}: directory {directory} has mode {mode:04o}: others may replace the "
            f"file; run 'chmod go-w {directory}' or keep pairing files elsewhere"
        )


def _check_descriptor(path: Path, fd: int, what: str) -> None:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise UnsafePairingFile(f"{what} is not a regular file")
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        raise UnsafePairingFile(
            f"{what} has mode {mode:04o}: others may read the pairing's secret; run "
            f"'chmod 600 {path}' if only you could have changed it, else forget it and pair again"
        )
    euid = os.geteuid()
    if info.st_uid != euid:
        raise UnsafePairingFile(
            f"{what} belongs to uid {info.st_uid}, not to this process's user (uid {euid})"
        )


def open_checked(path: Path, flags: int, what: str, mode: int = 0o600) -> int:
    """Open ``path`` without following a symbolic link and check the open descriptor (regular,
    mode 0600 or stricter, this user's); returns the descriptor.

    :raises PairingFileError: naming ``what`` and the cause, in one line.
    """
    check_directory(path)
    try:
        fd = os.open(path, flags | _NOFOLLOW | os.O_NONBLOCK, mode)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UnsafePairingFile(
                f"{what} is a symbolic link: give the file itself (links are refused, so "
                "nobody can point the pairing elsewhere)"
            ) from None
        raise _oserror(f"{what}: cannot open it", e) from None
    try:
        _check_descriptor(path, fd, what)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_file(path: Path) -> None:
    """Refuse a pairing file others could read or change (see :func:`open_checked`)."""
    os.close(open_checked(path, os.O_RDONLY, _where(path)))


class PairingStore:
    """One pairing file (see the module docstring).

    :param path: the file.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock: IO[bytes] | None = None

    @property
    def lock_path(self) -> Path:
        """``PATH.lock``."""
        return self.path.with_name(self.path.name + ".lock")

    def exists(self) -> bool:
        """True when something is at the path (even a broken file: :meth:`load` says what)."""
        return os.path.lexists(self.path)

    def load(self) -> PairingRecord:
        """Read and check the file.

        :raises PairingFileError: naming the path and what is wrong.
        """
        where = _where(self.path)
        fd = open_checked(self.path, os.O_RDONLY, where)
        try:
            data = os.read(fd, MAX_FILE_SIZE + 1)
        except OSError as e:
            raise _oserror(f"{where}: cannot read it", e) from None
        finally:
            os.close(fd)
        if len(data) > MAX_FILE_SIZE:
            raise PairingFileError(f"{where} is over {MAX_FILE_SIZE} bytes: not a pairing file")
        return decode(data, where)

    def save(self, record: PairingRecord) -> None:
        """Write ``record`` atomically and durably (see the module docstring).

        :raises PairingFileError: when it cannot be written (the OS error in words).
        """
        check_directory(self.path)
        directory = self.path.parent
        temporary = directory / f".{self.path.name}.{os.getpid()}.tmp"
        data = encode(record)
        try:
            with contextlib.suppress(FileNotFoundError):
                temporary.unlink()
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW
            fd = os.open(temporary, flags, 0o600)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temporary, self.path)
            fsync_directory(directory)
        except OSError as e:
            with contextlib.suppress(OSError):
                temporary.unlink()
            raise _oserror(f"{_where(self.path)}: cannot write it", e) from None

    def lock(self) -> None:
        """Hold ``PATH.lock`` exclusively until :meth:`unlock` or the process ends.

        :raises PairingInUse: when another process holds it.
        :raises PairingFileError: when the lock file cannot be made or is not safe.
        """
        if self._lock is not None or fcntl is None:
            return
        what = f"{_where(self.path)}: its lock file {self.lock_path}"
        fd = open_checked(self.lock_path, os.O_RDWR | os.O_CREAT, what)
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


def fsync_directory(directory: Path) -> None:
    """``fsync`` a directory (what a rename in it changed), where the file system allows."""
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
            store.lock_path.unlink()
        fsync_directory(store.path.parent)
    finally:
        store.unlock()
    return record
