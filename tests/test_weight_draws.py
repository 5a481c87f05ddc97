"""The networks' random weights: drawn on the host in parallel streams, the same bits whatever the threads.

:func:`sk_deq.nn.layers.gaussian_weights` takes one seed from a torch
generator and draws blocks of rows from numpy streams spawned from it, on
up to ``torch.get_num_threads()`` threads.  Checked here: the draws do not
depend on the number of threads, the float32 weights are the float64 draws
rounded, the draws are standard normal (a Kolmogorov-Smirnov test and the
moments), distinct matrices from one generator are independent, and the
``meta`` device draws nothing.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from sk_deq.estimators import DEQClassifier, MatchedExplicitClassifier
from sk_deq.nn import DEQLayer, ExplicitNet
from sk_deq.nn.layers import ROWS_PER_STREAM, gaussian_weights


@pytest.fixture
def torch_threads():
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("shape", [(1, 1), (ROWS_PER_STREAM - 1, 3), (ROWS_PER_STREAM + 1, 17), (700, 300)])
def test_the_same_bits_for_any_number_of_threads(torch_threads, shape):
    draws = []
    for threads in (1, 2, 3, 8):
        torch_threads(threads)
        draws.append(gaussian_weights(*shape, _gen(), dtype=torch.float64))
    for W in draws[1:]:
        assert torch.equal(W, draws[0])


def test_float32_weights_are_the_float64_draws_rounded():
    W64 = gaussian_weights(300, 50, _gen(3), dtype=torch.float64)
    W32 = gaussian_weights(300, 50, _gen(3), dtype=torch.float32)
    assert W32.dtype == torch.float32 and W64.dtype == torch.float64
    assert torch.equal(W32, W64.to(torch.float32))


def test_the_draws_are_standard_normal():
    W = gaussian_weights(1000, 200, _gen(1), dtype=torch.float64).numpy().ravel()
    assert stats.kstest(W, "norm").pvalue > 1e-4
    # 200,000 draws: the mean within 5 standard errors, the variance within 5 of its standard errors
    assert abs(W.mean()) < 5 / np.sqrt(W.size)
    assert abs(W.var() - 1.0) < 5 * np.sqrt(2.0 / W.size)
    # rows of different streams are uncorrelated (one stream is 64 rows)
    first, second = W.reshape(1000, 200)[:ROWS_PER_STREAM], W.reshape(1000, 200)[ROWS_PER_STREAM : 2 * ROWS_PER_STREAM]
    r = np.corrcoef(first.ravel(), second.ravel())[0, 1]
    assert abs(r) < 5 / np.sqrt(first.size)


def test_one_generator_gives_independent_matrices_and_seeds_differ():
    g = _gen(5)
    A, B = gaussian_weights(100, 100, g), gaussian_weights(100, 100, g)
    assert not torch.equal(A, B)
    assert abs(np.corrcoef(A.numpy().ravel(), B.numpy().ravel())[0, 1]) < 0.05
    assert not torch.equal(gaussian_weights(10, 10, _gen(1)), gaussian_weights(10, 10, _gen(2)))
    torch.manual_seed(7)  # no generator: torch's default one, as torch.randn
    a = gaussian_weights(5, 5)
    torch.manual_seed(7)
    assert torch.equal(a, gaussian_weights(5, 5))


def test_the_meta_device_draws_nothing():
    g = _gen(0)
    state = g.get_state()
    W = gaussian_weights(4096, 4096, g, device="meta")
    assert W.device.type == "meta" and W.shape == (4096, 4096)
    assert torch.equal(g.get_state(), state)
    with torch.device("meta"):
        net = ExplicitNet(5, 8, ["relu"], [0.0])
    assert net.weights[0].device.type == "meta"


@pytest.mark.filterwarnings(
    "ignore::sklearn.exceptions.ConvergenceWarning"
)  # one L-BFGS iteration: only the draw matters
def test_modules_and_estimators_draw_the_same_network_whatever_the_threads(torch_threads):
    X = np.random.default_rng(0).standard_normal((60, 6))
    y = (X[:, 0] > 0).astype(int)
    nets, weights = [], []
    for threads in (1, 2):
        torch_threads(threads)
        nets.append(DEQLayer(6, 130, "tanh", 0.2, 0.0, generator=_gen(4), dtype=torch.float64))
        for cls in (DEQClassifier, MatchedExplicitClassifier):
            est = cls(n_hidden=130, random_state=0, max_iter=1).fit(X, y)
            weights.append({k: v.clone() for k, v in est.module_.features.state_dict().items()})
    assert torch.equal(nets[0].A, nets[1].A) and torch.equal(nets[0].B, nets[1].B)
    for one, two in zip(weights[:2], weights[2:]):  # the hidden weights are not trained (trainable='readout')
        assert one.keys() == two.keys() and all(torch.equal(one[k], two[k]) for k in one)
