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
from typing import Any

_SCHEMES = ("hdfs://", "s3a://", "s3://", "gs://", "abfs://", "abfss://", "wasb://", "file:")


def is_remote(path: str) -> bool:
    """True for paths with a filesystem scheme other than a plain local path."""
    return "://" in path and not path.startswith("file:")


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
