"""The layers of sk_deq.nn.layers: the DEQ layer and the explicit net against independent computations, and the
Gaussian draws of their weights (the same bits whatever the threads)."""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from sk_deq.activations import HardTanh, LeakyReLU, get_activation
from sk_deq.kernels import anderson_fixed_point
from sk_deq.matching import match_explicit
from sk_deq.estimators import DEQClassifier, MatchedExplicitClassifier
from sk_deq.nn import DEQDivergenceError, DEQLayer, ExplicitNet
from sk_deq.nn.layers import ROWS_PER_STREAM, WeightDraws, gaussian_weights
from sk_deq.theory import deq_ck_coefficients, explicit_coefficients


def _layer(m=8, p=3, activation="tanh", sigma_a2=0.3, solver="iteration", train=True, seed=0, **kw):
    act = get_activation(activation)
    c = deq_ck_coefficients(act, sigma_a2, 1.0).moments.mean
    return DEQLayer(
        p,
        m,
        act,
        sigma_a2,
        c,
        solver=solver,
        train_a=train,
        train_b=train,
        generator=torch.Generator().manual_seed(seed),
        dtype=torch.float64,
        **kw,
    )


def _unrolled(layer, x, n_steps=300):
    """z* by plain iteration with the whole graph kept (the autograd reference)."""
    z = torch.zeros(x.shape[0], layer.n_hidden, dtype=x.dtype)
    for _ in range(n_steps):
        z = layer.step(z, x)
    return z


@pytest.mark.parametrize("solver", ["iteration", "anderson"])
@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_implicit_gradient_matches_unrolled_autograd(solver, activation):
    torch.manual_seed(0)
    layer = _layer(activation=activation, solver=solver, tol=1e-13, max_iter=500)
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 8, dtype=torch.float64)

    loss = (w * layer(x)).sum() + (layer(x) ** 2).sum()
    gA, gB, gx = torch.autograd.grad(loss, [layer.A, layer.B, x])
    assert layer.backward_info is not None and layer.backward_info.converged

    z_ref = _unrolled(layer, x)
    loss_ref = (w * z_ref).sum() + (z_ref**2).sum()
    rA, rB, rx = torch.autograd.grad(loss_ref, [layer.A, layer.B, x])
    for g, r in ((gA, rA), (gB, rB), (gx, rx)):
        rel = float((g - r).norm() / r.norm())
        assert rel < 1e-4, rel
        assert float(r.norm()) > 1e-3  # not a vacuous comparison


def test_implicit_gradient_with_frozen_input_weights():
    layer = _layer(tol=1e-13, max_iter=500)
    layer.B.requires_grad_(False)
    x = torch.randn(5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    (gA,) = torch.autograd.grad(layer(x).sin().sum(), [layer.A])
    (rA,) = torch.autograd.grad(_unrolled(layer, x).sin().sum(), [layer.A])
    assert float((gA - rA).norm() / rA.norm()) < 1e-4


def test_no_graph_is_kept_through_the_forward_iterations():
    def graph_size(t):
        seen, stack = set(), [t.grad_fn]
        while stack:
            node = stack.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            stack.extend(n for n, _ in node.next_functions)
        return len(seen)

    x = torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    sizes = []
    for tol in (1e-2, 1e-12):
        layer = _layer(tol=tol, max_iter=500)
        z = layer(x)
        sizes.append((layer.forward_info.n_iter, graph_size(z)))
    (it1, g1), (it2, g2) = sizes
    assert it2 > it1 + 10  # many more iterations ...
    assert g1 == g2 < 20  # ... same, small graph
    assert graph_size(_unrolled(_layer(), x, n_steps=20)) > 50


def test_no_grad_forward_returns_plain_solution():
    layer = _layer(train=False)
    x = torch.randn(4, 3, dtype=torch.float64)
    z = layer(x)
    assert z.grad_fn is None
    fz = layer.step(z, x)
    assert float(((fz - z).norm(dim=1) / fz.norm(dim=1)).max()) < layer.tol


@pytest.mark.parametrize("activation, sigma_a2", [("relu", 0.2), ("tanh", 0.5)])
def test_forward_matches_numpy_reference(activation, sigma_a2):
    layer = _layer(m=120, p=10, activation=activation, sigma_a2=sigma_a2, train=False, tol=1e-12, max_iter=300)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((6, 10)) / math.sqrt(10)
    z, info = layer.solve(torch.from_numpy(X))
    assert info.converged

    A, B = layer.A.detach().numpy(), layer.B.detach().numpy()
    act = get_activation(activation)
    c = deq_ck_coefficients(act, sigma_a2, 1.0).moments.mean
    U = math.sqrt(1 - sigma_a2) * B @ X.T  # columns are samples, as on the theory page

    def f(Z):
        return (act(math.sqrt(sigma_a2) * A @ Z + U) - c) / math.sqrt(120)

    Z_ref, _, res = anderson_fixed_point(f, np.zeros((120, 6)), tol=1e-13, max_iter=500)
    assert res < 1e-12
    np.testing.assert_allclose(z.numpy(), Z_ref.T, rtol=1e-9, atol=1e-11)


def test_feature_scale_and_centring_follow_the_theory():
    # theory page, 'The DEQ' and 'The four equations': ||z*||^2 -> E_tau[phi^2] = Var_tau[phi0], and the centred features have mean ~ 0
    m, p, n = 1500, 200, 60
    sa2 = 0.2
    coefs = deq_ck_coefficients("relu", sa2, 1.0)
    layer = DEQLayer(
        p, m, "relu", sa2, coefs.moments.mean, generator=torch.Generator().manual_seed(0), dtype=torch.float64, tol=1e-8
    )
    X = torch.randn(n, p, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) / math.sqrt(p)
    X = X / X.norm(dim=1, keepdim=True)  # tau0 = 1 exactly
    z, _ = layer.solve(X)
    sq = (z**2).sum(dim=1).mean().item()
    assert sq == pytest.approx(coefs.moments.var, rel=0.05)
    assert abs(z.sum(dim=1).mean().item() / math.sqrt(m)) < 0.05 * math.sqrt(coefs.moments.var)
    # an uncentred layer (c = 0) is far off
    layer.center = 0.0
    z0, _ = layer.solve(X)
    assert (z0**2).sum(dim=1).mean().item() > 1.5 * coefs.moments.var


def test_divergence_is_an_error_suggesting_smaller_sigma_a2():
    from sk_deq.activations import Activation

    boom = Activation(np.tanh, "boom", torch_func=lambda t: 1e30 * t * t, odd=True)
    layer = DEQLayer(3, 16, boom, 0.5, 0.0, generator=torch.Generator().manual_seed(0))
    with pytest.raises(DEQDivergenceError, match="smaller sigma_a2"):
        layer.solve(torch.ones(2, 3))
    assert issubclass(DEQDivergenceError, ValueError)


def test_solver_options_and_settings_are_used():
    layer = _layer(solver="anderson", solver_options={"memory": 2}, max_iter=3, tol=1e-14)
    _, info = layer.solve(torch.randn(2, 3, dtype=torch.float64))
    assert info.solver == "anderson" and info.n_iter == 3 and not info.converged
    assert "DEQLayer" in repr(layer) and "sigma_a2=0.3" in repr(layer)


def test_same_generator_same_weights_in_every_dtype():
    a = DEQLayer(5, 7, "relu", 0.2, 0.3, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    b = DEQLayer(5, 7, "relu", 0.2, 0.3, generator=torch.Generator().manual_seed(4), dtype=torch.float32)
    torch.testing.assert_close(a.A.float(), b.A)
    torch.testing.assert_close(a.B.float(), b.B)


# ---------------------------------------------------------------------------
# explicit net


def test_explicit_net_matches_numpy_reference():
    layers = (LeakyReLU(1.2, 0.1), HardTanh(0.8, 1.1), "relu")
    coefs = explicit_coefficients(layers, 1.0)
    net = ExplicitNet(
        6, 40, coefs.layers, coefs.centers, generator=torch.Generator().manual_seed(0), dtype=torch.float64
    )
    X = np.random.default_rng(0).standard_normal((5, 6)) / math.sqrt(6)
    out = net(torch.from_numpy(X)).detach().numpy()
    Y = X.T
    for W, act, c in zip(net.weights, coefs.layers, coefs.centers):
        Y = (act(W.detach().numpy() @ Y) - c) / math.sqrt(40)
    np.testing.assert_allclose(out, Y.T, rtol=1e-12, atol=1e-14)
    assert len(net.weights) == 3 and net.weights[0].shape == (40, 6) and net.weights[2].shape == (40, 40)


def test_explicit_feature_scale_follows_the_recursion():
    # theory page, 'Explicit networks': ||y_L||^2 -> tau_L^2 for the matched ReLU-DEQ equivalent
    match = match_explicit("relu", 0.2, 1.0)
    m, p, n = 2000, 300, 60
    net = ExplicitNet(
        p, m, match.layers, match.centers, generator=torch.Generator().manual_seed(0), dtype=torch.float64
    )
    X = torch.randn(n, p, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    X = X / X.norm(dim=1, keepdim=True)
    with torch.no_grad():
        y = net(X)
    assert (y**2).sum(dim=1).mean().item() == pytest.approx(match.explicit.tau**2, rel=0.05)


def test_explicit_trainable_flags_and_errors():
    net = ExplicitNet(3, 4, ("relu", "tanh"), (0.4, 0.0), trainable=(False, True))
    assert [w.requires_grad for w in net.weights] == [False, True]
    with pytest.raises(ValueError, match="at least one layer"):
        ExplicitNet(3, 4, (), ())
    with pytest.raises(ValueError, match="centring"):
        ExplicitNet(3, 4, ("relu",), (0.1, 0.2))
    with pytest.raises(ValueError, match="trainable"):
        ExplicitNet(3, 4, ("relu",), (0.1,), trainable=(True, True))


# ---------------------------------------------------------------------------
# the weight draws: gaussian_weights takes one seed from a torch generator and draws blocks of rows
# from numpy streams spawned from it, on up to torch.get_num_threads() threads.  Checked here: the
# draws do not depend on the number of threads, the float32 weights are the float64 draws rounded,
# the draws are standard normal (a Kolmogorov-Smirnov test and the moments), distinct matrices from
# one generator are independent, and the meta device draws nothing.


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


def test_weights_drawn_ahead_are_the_generators_to_the_bit():
    shapes = [(ROWS_PER_STREAM + 5, 30), (40, ROWS_PER_STREAM + 5)]
    ahead, g = WeightDraws(shapes, _gen(4)), _gen(4)
    for rows, cols in [*shapes, (7, 3), (2, 9)]:  # the last two past the drawn ones: from the generator
        assert torch.equal(
            gaussian_weights(rows, cols, ahead, dtype=torch.float64),
            gaussian_weights(rows, cols, g, dtype=torch.float64),
        )
    assert torch.equal(ahead.generator.get_state(), g.get_state())  # the same seeds taken, in the same order


def test_weights_drawn_ahead_refuse_another_order():
    ahead = WeightDraws([(20, 30), (30, 30)], _gen(0))
    with pytest.raises(RuntimeError, match="30 x 30 weight matrix was asked for where 20 x 30"):
        ahead.take(30, 30)


def test_a_failed_draw_ahead_raises_at_the_build(monkeypatch):
    import sk_deq.nn.layers as layers

    def fail(seed, rows, cols):
        raise MemoryError("no room")

    monkeypatch.setattr(layers, "_draw", fail)
    ahead = WeightDraws([(5, 5)], _gen(0))
    with pytest.raises(MemoryError, match="no room"):
        gaussian_weights(5, 5, ahead)


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


@pytest.mark.parametrize(
    "layers",
    [
        (LeakyReLU(1.21, 0.0048), LeakyReLU(0.94, 0.56)),
        (HardTanh(0.76, 1.2),),
        (LeakyReLU(0.9, 0.45), "tanh", "gelu", "sigmoid"),
        ("relu", lambda t: t * 0.5),  # a user's torch callable: its result is a new tensor
        (lambda t: t,),  # ... or the pre-activations themselves
    ],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_explicit_net_without_a_graph_gives_the_graphs_bits_and_leaves_its_input(layers, dtype):
    """Without autograd the forward writes each layer's activation over its product's buffer (a new tensor per
    layer); with it, the torch forms."""
    net = ExplicitNet(30, 64, layers, [0.1 * (i + 1) for i in range(len(layers))], generator=_gen(2), dtype=dtype)
    x = torch.randn(50, 30, generator=_gen(3), dtype=dtype) / 5
    before = x.clone()
    with torch.no_grad():
        fast = net(x)
    assert torch.equal(x, before)
    with torch.enable_grad():
        net.weights[0].requires_grad_(True)
        slow = net(x)
    assert slow.requires_grad and slow.grad_fn is not None
    assert torch.equal(fast, slow.detach())
