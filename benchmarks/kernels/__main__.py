"""``python -m benchmarks.kernels MEMBER [options]``."""

from . import main

raise SystemExit(main())
