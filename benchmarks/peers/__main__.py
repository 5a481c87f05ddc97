"""``python -m benchmarks.peers MEMBER [options]``."""

from . import main

raise SystemExit(main())
