"""Small files beside the Parquet tables (stats, summary, HTML), on any Hadoop filesystem.

The output directory may be local or on shared storage (``hdfs://``, ``s3a://``...), so these
go through the JVM's Hadoop ``FileSystem`` of the running SparkSession, never Python ``open``.
Paths without a scheme are local paths.

Small files are written and read through the *raw* filesystem under a checksumming one (the
local filesystem is Hadoop's ``ChecksumFileSystem``), so no ``.<name>.crc`` file is left
beside them: ``report/`` holds only what a reader opens. A stale checksum file of an earlier
run is removed when the file is replaced.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from .inputs import is_remote as is_remote

_SCHEMES = ("hdfs://", "s3a://", "s3://", "gs://", "abfs://", "abfss://", "wasb://", "file:")


def qualify(path: str) -> str:
    """An absolute local path for scheme-less paths; other paths unchanged."""
    return path if path.startswith(_SCHEMES) or "://" in path else os.path.abspath(path)


def join(base: str, *parts: str) -> str:
    """Join path parts with ``/`` (works for URLs and local paths)."""
    return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts)])


def _fs(spark: Any, path: str) -> tuple[Any, Any]:
    jvm = spark.sparkContext._jvm
    jpath = jvm.org.apache.hadoop.fs.Path(qualify(path))
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    return jpath.getFileSystem(conf), jpath


def _raw(fs: Any) -> Any:
    """The filesystem under a checksumming one (the local one), else ``fs`` itself."""
    try:
        return fs.getRawFileSystem()
    except Exception:  # py4j: not a FilterFileSystem, no such method
        return fs


def exists(spark: Any, path: str) -> bool:
    """True if ``path`` exists."""
    fs, jpath = _fs(spark, path)
    return bool(fs.exists(jpath))


def write_text(spark: Any, path: str, text: str) -> None:
    """Create or replace the file ``path`` with UTF-8 ``text`` (parent directories made; no
    checksum file beside it)."""
    fs, jpath = _fs(spark, path)
    if fs.exists(jpath):
        fs.delete(jpath, False)  # with its checksum file, if an earlier writer left one
    out = _raw(fs).create(jpath, True)
    try:
        data = text.encode("utf-8")
        for i in range(0, len(data), 1 << 20):
            out.write(bytearray(data[i : i + (1 << 20)]))
    finally:
        out.close()


def read_text(spark: Any, path: str) -> str:
    """Return the UTF-8 content of the file ``path``."""
    fs, jpath = _fs(spark, path)
    stream = _raw(fs).open(jpath)
    try:
        jvm = spark.sparkContext._jvm
        data = jvm.org.apache.commons.io.IOUtils.toByteArray(stream)
    finally:
        stream.close()
    return bytes(data).decode("utf-8")


def delete(spark: Any, path: str) -> None:
    """Remove ``path`` recursively, if it exists."""
    fs, jpath = _fs(spark, path)
    if fs.exists(jpath):
        fs.delete(jpath, True)


def replace_text(spark: Any, path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed over it, so that a reader
    (or a crash) sees the old content or the new one, never a part."""
    fs, jpath = _fs(spark, path)
    tmp = path + ".tmp"
    write_text(spark, tmp, text)
    _, jtmp = _fs(spark, tmp)
    raw = _raw(fs)
    if raw.exists(jpath):
        raw.delete(jpath, False)
    if not raw.rename(jtmp, jpath):
        raise OSError(f"cannot rename {tmp} to {path}")


@dataclass(frozen=True)
class FileInfo:
    """A file found by :func:`list_files`: its path, size and modification time."""

    path: str
    size: int
    mtime_ms: int


def list_files(spark: Any, pattern: str) -> list[FileInfo]:
    """The files a remote glob matches (directories listed recursively), through Hadoop's
    FileSystem; hidden files and Spark's markers (``.``/``_`` names) left out."""
    fs, jpath = _fs(spark, pattern)
    out: list[FileInfo] = []
    stack = list(fs.globStatus(jpath) or [])
    while stack:
        status = stack.pop()
        name = status.getPath().getName()
        if name.startswith((".", "_")):
            continue
        if status.isDirectory():
            stack.extend(fs.listStatus(status.getPath()))
        else:
            out.append(
                FileInfo(status.getPath().toString(), status.getLen(), status.getModificationTime())
            )
    return sorted(out, key=lambda f: f.path)


def children(spark: Any, path: str) -> list[str]:
    """The names of the entries of directory ``path`` (empty when it does not exist)."""
    fs, jpath = _fs(spark, path)
    if not fs.exists(jpath):
        return []
    return sorted(s.getPath().getName() for s in fs.listStatus(jpath))


def move_into(spark: Any, source_dir: str, target_dir: str) -> int:
    """Move every data file of ``source_dir`` into ``target_dir`` (made if missing), keeping
    names (Spark's are unique per job); returns how many were moved."""
    fs, jsource = _fs(spark, source_dir)
    _, jtarget = _fs(spark, target_dir)
    fs.mkdirs(jtarget)
    jvm = spark.sparkContext._jvm
    moved = 0
    for status in fs.listStatus(jsource):
        name = status.getPath().getName()
        if status.isDirectory() or name.startswith((".", "_")):
            continue
        if not fs.rename(status.getPath(), jvm.org.apache.hadoop.fs.Path(jtarget, name)):
            raise OSError(f"cannot move {status.getPath().toString()} into {target_dir}")
        moved += 1
    return moved


def touch(spark: Any, path: str) -> None:
    """Create an empty file ``path`` (e.g. a ``_SUCCESS`` marker), replacing any."""
    write_text(spark, path, "")
