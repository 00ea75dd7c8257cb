"""Tests of the txdilation_analytics Spark pipeline (marked ``spark`` where they need Spark)."""
