"""``python -m bench``: the benchmark from a checkout (``make bench``); not in the wheel."""

import sys

from bench.pipeline import main

sys.exit(main())
