"""``python -m benchmarks.scale MEMBER [options]``."""

from . import main

raise SystemExit(main())
