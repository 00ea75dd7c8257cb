"""``python -m txdilation_analytics`` and ``spark-submit .../txdilation_analytics/__main__.py``."""

from __future__ import annotations

import sys

from txdilation_analytics.cli import main

if __name__ == "__main__":
    sys.exit(main())
