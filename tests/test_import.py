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


def test_transformers_work_without_dask():
    code = (
        "import sys\n"
        "sys.modules['dask'] = sys.modules['distributed'] = None  # as if not installed\n"
        "import numpy as np\n"
        "from sk_deq import ImplicitCKTransformer\n"
        "X = np.random.default_rng(0).standard_normal((20, 3))\n"
        "assert ImplicitCKTransformer().fit(X).transform(X).shape == (20, 20)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
