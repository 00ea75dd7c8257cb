"""``txdilation-analytics bundle``: the pipeline's code as one zip for ``spark-submit --py-files``.

On a cluster the driver runs where ``txdilation[analytics]`` is installed; executors run Python
only to read SQLite usage databases (:mod:`.sqlite_source`, in Spark's Python workers), which
needs this package's modules and the ``pyspark`` and ``pyarrow`` the workers' Python already
has. So what is shipped is this pure-Python package (about 100 kB), not an environment.
"""

from __future__ import annotations

import os
import zipfile

SUFFIXES = (".py", ".json", ".j2", ".typed")


def write_bundle(path: str) -> list[str]:
    """Write the ``txdilation_analytics`` package (its modules, templates and data) into the
    zip file ``path``; returns the names written."""
    package = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(package)
    names = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for dirpath, dirs, files in os.walk(package):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(SUFFIXES):
                    full = os.path.join(dirpath, name)
                    arcname = os.path.relpath(full, root)
                    z.write(full, arcname)
                    names.append(arcname)
    return names


__all__ = ["write_bundle"]
