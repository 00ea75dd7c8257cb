"""The reliability figures file (tests/support/figures.py) and its rendering into
docs/reliability.md (tests/support/render_figures.py); the committed table matches the committed
figures."""

from __future__ import annotations

import tempfile
from pathlib import Path

from twisted.trial.unittest import SynchronousTestCase

from tests.support import figures, render_figures


class FiguresTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.path = Path(tempfile.mkdtemp()) / "figures.json"

    def test_nothing_written_without_the_variable(self) -> None:
        """Without TXDILATION_FIGURES, record() writes nothing anywhere."""
        self.assertIsNone(figures.figures_path({}))
        self.assertEqual(figures.figures_path({"TXDILATION_FIGURES": " x.json "}), Path("x.json"))

    def test_records_replace_and_aggregate(self) -> None:
        """A test recorded twice counts once; figures are summed per pairing, maxima kept."""
        record = figures.record
        record("t.a", "txdilation-txdilation", self.path, cuts_survived=3, peak_memory_mib=50)
        record("t.a", "txdilation-txdilation", self.path, cuts_survived=4, peak_memory_mib=60)
        record("t.b", "txdilation-txdilation", self.path, cuts_survived=5, peak_memory_mib=40)
        record("t.c", "all", self.path, fuzz_cases_run=7)
        table = figures.aggregate(figures.load(self.path))
        self.assertEqual(table["cuts_survived"], {"txdilation-txdilation": 9})
        self.assertEqual(table["peak_memory_mib"], {"txdilation-txdilation": 60})
        self.assertEqual(table["fuzz_cases_run"], {"all": 7})
        self.assertRaises(ValueError, record, "t.d", "nobody", self.path, cuts_survived=1)

    def test_render(self) -> None:
        """The table has a row per known figure (a dash where nothing was recorded), a column
        per pairing and a total; the document outside the markers is kept."""
        figures.record("t.a", "stock-leads-txdilation", self.path, bytes_verified=2**30)
        figures.record("t.b", "txdilation-leads-stock", self.path, bytes_verified=2**29)
        table = render_figures.render_table(figures.load(self.path))
        rows = table.splitlines()
        self.assertEqual(len(rows), 2 + len(figures.FIGURES))
        verified = next(r for r in rows if r.startswith("| bytes delivered"))
        self.assertEqual(
            verified, "| bytes delivered and verified by SHA-256 | 0.50 GiB | 1.00 GiB | — | — "
            "| 1.50 GiB |",
        )  # fmt: skip
        self.assertIn("| fuzz cases run | — | — | — | — | — |", rows)
        doc = f"intro\n{render_figures.BEGIN}\nold\n{render_figures.END}\noutro\n"
        new = render_figures.replace_table(doc, table)
        self.assertTrue(new.startswith("intro\n") and new.endswith("outro\n"))
        self.assertIn(table, new)
        self.assertRaises(ValueError, render_figures.replace_table, "no markers", table)

    def test_committed_table_is_current(self) -> None:
        """docs/reliability.md shows the table rendered from
        benchmarks/figures/reliability-figures.json."""
        self.assertEqual(render_figures.main(["--check"]), 0)
