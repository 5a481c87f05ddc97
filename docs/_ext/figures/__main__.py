"""``python docs/_ext/figures [--check]``: render the README's measured figures (see :mod:`figures.readme`)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from figures.readme import main

raise SystemExit(main())
