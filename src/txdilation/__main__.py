"""``python -m txdilation``: the ``txdilation`` command (see :mod:`txdilation.cli`)."""

from __future__ import annotations

import sys

from txdilation.cli import main

if __name__ == "__main__":
    sys.exit(main())
