"""txdilation-analytics: the Spark pipeline from dilation telemetry and server records to reports.

Layer: offline analytics, separate from the protocol (it imports only the schema of
``txdilation.telemetry``). Stages, each reading the previous stage's Parquet under ``--output``:

- ``ingest``: sources -> ``bronze/`` (typed tables per source, bad lines counted, private fields
  scrubbed); readers in :mod:`.sources`, pure cleaning in :mod:`.bronze`;
- ``sessionize``: ``bronze/events`` -> ``silver/events``, ``attempts``, ``generations``,
  ``sessions`` (:mod:`.silver`);
- ``aggregate``: silver and bronze -> ``gold/`` daily tables (:mod:`.gold`);
- ``report``: -> ``report/summary.json`` and ``report/index.html`` (:mod:`.summary`,
  :mod:`.report`).

Transforms are pure ``DataFrame -> DataFrame`` functions using Spark built-ins only (no Python
UDFs); all I/O is in :mod:`.sources`, :mod:`.storage` and :mod:`.pipeline`.
"""

from __future__ import annotations

__all__: list[str] = []
