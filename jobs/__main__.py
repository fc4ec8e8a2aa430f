"""``python -m jobs`` and ``spark-submit .../jobs/__main__.py VERB ...`` both land here."""

import sys

from jobs.cli import main

if __name__ == "__main__":
    sys.exit(main())
