"""``python -m benchmarks.gpu MEMBER [options]``."""

from . import main

raise SystemExit(main())
