"""``python -m spark_chkpt.cli``: the ``spark-chkpt`` command, for a Python without the
console script on its PATH (a cluster's driver, a subprocess of a test)."""

from __future__ import annotations

import sys

from spark_chkpt.cli import main

sys.exit(main())
