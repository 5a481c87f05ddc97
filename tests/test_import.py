"""The theory is usable without a deep-learning stack."""

import subprocess
import sys


def test_theory_does_not_import_torch():
    code = (
        "import sys, sk_deq, sk_deq.theory, sk_deq.matching, sk_deq.kernels, sk_deq.datasets, sk_deq.cli\n"
        "sk_deq.match_explicit('tanh', 0.2, 1.0)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_public_api():
    import sk_deq

    for name in sk_deq.__all__:
        assert hasattr(sk_deq, name), name
    assert sk_deq.__version__
