"""The docs' figures package (``docs/_ext/figures``) importable by the tests."""

import sys
from pathlib import Path

EXT = Path(__file__).resolve().parents[2] / "docs" / "_ext"
if str(EXT) not in sys.path:
    sys.path.insert(0, str(EXT))
