"""How often the host waits for the device: one scalar read per fixed-point iteration, one per L-BFGS iteration.

Counted on the CPU with a ``TorchDispatchMode`` (the ``count_host_syncs``
fixture of ``tests/conftest.py``): every operation that would block the host
on a GPU (a scalar read, a data-dependent shape, a copy to the host).  The
fixed-point solvers read one scalar per iteration (the number of samples
still active, or -1 for a non-finite residual); a solve adds a constant
number of reads for its summary, whatever its length.
"""

import warnings

import numpy as np
import pytest
import torch
from sklearn.exceptions import ConvergenceWarning

from sk_deq import DEQClassifier
from sk_deq.nn import anderson, fixed_point_iteration
from sk_deq.nn import _lbfgs_torch
from sk_deq.nn.readout import ReadoutObjective, train_readout

#: Host reads of one solve besides its iterations: the summary (largest residual, samples above tol).
SOLVE_READS = 2
#: Those of one DEQ predict block besides its iterations: the solve's summary, its rows without the
#: padding (three), the mean iteration count and the block's finiteness check.
PREDICT_READS = 7


def _contraction():
    W = 0.1 * torch.randn(16, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    return lambda z: torch.tanh(z @ W.T + 1.0)


@pytest.mark.parametrize("solver", [fixed_point_iteration, anderson])
def test_a_fixed_point_solve_reads_the_host_once_per_iteration(solver, count_host_syncs):
    f, counts = _contraction(), {}
    for max_iter in (10, 20):
        with count_host_syncs() as syncs:
            _, info = solver(f, torch.zeros(8, 16, dtype=torch.float64), tol=1e-300, max_iter=max_iter)
        assert info.n_iter == max_iter and not info.converged
        counts[max_iter] = syncs.total
    assert counts[20] - counts[10] == 10  # one per iteration (four before, plus a boolean-mask index)
    assert counts[10] == 10 + SOLVE_READS


def test_a_solve_that_converges_or_diverges_stops_on_its_one_read(count_host_syncs):
    with count_host_syncs() as syncs:
        _, info = fixed_point_iteration(lambda z: 0.5 * z + 1.0, torch.zeros(3, 2), tol=1e-6, max_iter=100)
    assert info.converged and syncs.total == info.n_iter + SOLVE_READS
    z0 = torch.zeros(3, 2)
    with count_host_syncs() as syncs:
        _, info = fixed_point_iteration(lambda z: z.clone().index_fill_(0, torch.tensor([1]), torch.nan), z0)
    assert info.diverged and info.n_iter == 1 and syncs.total == 1 + SOLVE_READS


def _deq_reads(X, y, max_iter, count_host_syncs):
    est = DEQClassifier(
        n_hidden=32, fixed_point_solver="iteration", fixed_point_max_iter=max_iter, fixed_point_tol=1e-14,
        random_state=0, device="cpu",
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y)
        with count_host_syncs() as syncs:
            est.decision_function(X)
    assert est.fixed_point_info_["n_iter"] == max_iter and est.fixed_point_info_["n_solves"] == 1
    return syncs.total


def test_a_deq_predict_of_ten_iterations(count_host_syncs):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((64, 5))  # one block of rows: one solve
    y = (X[:, 0] > 0).astype(int)
    ten, twenty = (_deq_reads(X, y, n, count_host_syncs) for n in (10, 20))
    assert twenty - ten == 10  # one read per iteration
    assert ten == 10 + PREDICT_READS  # 17 (37 scalar reads and 10 boolean-mask indexings before)


def test_lbfgs_reads_the_host_at_most_twice_per_iteration(count_host_syncs, monkeypatch):
    # the torch back end (the default on a GPU) run on the CPU; its packed read of the scalars
    # (``tolist``) dispatches nothing on the CPU, so its calls are counted by a wrapper
    packed = []
    monkeypatch.setattr(_lbfgs_torch, "_read", lambda t: packed.append(t.numel()) or t.tolist())
    g = torch.Generator().manual_seed(0)
    Z, y = torch.randn(300, 20, generator=g), torch.randint(0, 3, (300,), generator=g)
    linear = torch.nn.Linear(20, 3, dtype=torch.float64)
    with count_host_syncs() as syncs:
        result = train_readout(linear, Z, y, max_epochs=10, alpha=1e-3, improvement_tol=1e-12, lbfgs_backend="torch")
    assert result.n_epochs == 10
    assert syncs.total + len(packed) <= 2 * result.n_epochs
    assert syncs.total == 0 and len(packed) == 11  # one read at the start, one per (unit-step) iteration


def test_the_readout_objective_reads_nothing_per_chunk(count_host_syncs):
    g = torch.Generator().manual_seed(0)
    Z, y = torch.randn(300, 20, generator=g), torch.randint(0, 3, (300,), generator=g)
    objective = ReadoutObjective(Z, y, 3, alpha=1e-3, weight=torch.rand(300, generator=g) + 0.5, chunk_size=50)
    W, b = torch.zeros(20, 3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)
    with count_host_syncs() as syncs:
        loss, _, _ = objective.evaluate(W, b)
    assert syncs.total == 0 and loss.shape == ()


@pytest.mark.parametrize("name", ["ExplicitClassifier", "MatchedExplicitClassifier"])
def test_features_of_a_tensor_read_the_host_once_whatever_the_chunks(name, count_host_syncs, monkeypatch):
    """Two reads whatever the chunks: the inputs' finiteness (validation) and the features' after the last
    chunk.  The range of the scaled inputs is read once for all chunks too: on a GPU a copy of the column
    extremes to the host, which the CPU does not see (it was one scalar read per chunk)."""
    import sk_deq
    from sk_deq.estimators._base import TorchEstimatorBase

    X = torch.randn(300, 5, generator=torch.Generator().manual_seed(0))
    est = getattr(sk_deq, name)(n_hidden=16, random_state=0).fit(X, (X[:, 0] > 0).long())
    reads = []
    for rows in (1024, 64):  # one chunk, then five
        monkeypatch.setattr(TorchEstimatorBase, "_chunk_rows", lambda self, device=None, fit=False, rows=rows: rows)
        with count_host_syncs() as syncs:
            est.features(X)
        reads.append(syncs.total)
    assert reads == [2, 2]
