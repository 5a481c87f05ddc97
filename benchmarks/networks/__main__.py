"""``python -m benchmarks.networks MEMBER [options]``."""

from . import main

raise SystemExit(main())
