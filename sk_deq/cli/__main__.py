"""``python -m sk_deq.cli``: the ``sk-deq`` command."""

import sys

from . import main

sys.exit(main())
