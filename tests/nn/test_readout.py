"""The fused, preconditioned readout solver (sk_deq.nn.readout) against autograd and a direct solve."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from sk_deq.nn.readout import train_readout
from sk_deq.nn.readout import ReadoutObjective, _Preconditioner, fit_readout, ridge_readout


def _autograd(Z, y, k, alpha, w, W, b):
    W = W.clone().requires_grad_(True)
    b = b.clone().requires_grad_(True)
    logits = Z.double() @ W + b
    if k == 1:
        per = F.binary_cross_entropy_with_logits(logits[:, 0], y.double(), reduction="none")
    else:
        per = F.cross_entropy(logits, y, reduction="none")
    loss = (per if w is None else per * w).mean() + 0.5 * alpha * (W * W).sum()
    loss.backward()
    return float(loss.detach()), W.grad, b.grad


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("chunk", [None, 37])
def test_loss_and_gradient_match_autograd(k, weighted, chunk, readout_problem):
    Z, y, w = readout_problem(k=max(k, 2))
    y = y % 2 if k == 1 else y % k
    w = w if weighted else None
    g = torch.Generator().manual_seed(1)
    W = torch.randn(Z.shape[1], k, generator=g, dtype=torch.float64)
    b = torch.randn(k, generator=g, dtype=torch.float64)
    loss, gW, gb = ReadoutObjective(Z, y, k, alpha=0.3, weight=w, chunk_size=chunk)(W, b)
    ref_loss, ref_gW, ref_gb = _autograd(Z, y, k, 0.3, w, W, b)
    assert loss == pytest.approx(ref_loss, rel=1e-13)
    torch.testing.assert_close(gW, ref_gW, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(gb, ref_gb, rtol=1e-12, atol=1e-14)


def test_float32_features_give_float64_accumulated_values_near_the_exact_ones(readout_problem):
    Z, y, _ = readout_problem()
    W = torch.full((Z.shape[1], 4), 0.1, dtype=torch.float64)
    b = torch.zeros(4, dtype=torch.float64)
    exact = ReadoutObjective(Z, y, 4, alpha=1e-3)(W, b)
    single = ReadoutObjective(Z.float(), y, 4, alpha=1e-3)(W, b)
    assert single[1].dtype == torch.float64
    # float32 products: relative errors of the order of float32's epsilon, not worse
    assert single[0] == pytest.approx(exact[0], rel=1e-6)
    torch.testing.assert_close(single[1], exact[1], rtol=1e-4, atol=1e-6)


def test_gram_is_the_weighted_second_moment_with_a_column_of_ones(readout_problem):
    Z, y, w = readout_problem(n=50, m=6)
    G = ReadoutObjective(Z, y, 4, weight=w, chunk_size=7).gram()
    Z1 = torch.cat([Z, torch.ones(len(Z), 1, dtype=Z.dtype)], dim=1)
    torch.testing.assert_close(G, Z1.T @ (Z1 * w[:, None]) / len(Z), rtol=1e-13, atol=1e-14)


def _fit(Z, y, k, alpha, w=None, precondition=None, tol=1e-10, max_iter=5000):
    lin = torch.nn.Linear(Z.shape[1], k, dtype=torch.float64)
    with torch.no_grad():
        lin.weight.zero_()
        lin.bias.zero_()
    obj = ReadoutObjective(Z, y, k, alpha, w)
    info = fit_readout(lin, obj, precondition=precondition, tol=tol, max_iter=max_iter, ftol=0.0)
    return lin, info


@pytest.mark.parametrize("k", [1, 4])
@pytest.mark.parametrize("separation", [0.3, 1.0])
def test_preconditioned_and_plain_solvers_reach_the_same_optimum(k, separation, readout_problem):
    Z, y, w = readout_problem(separation=separation)
    y = y % 2 if k == 1 else y
    plain, info_p = _fit(Z, y, k, 1e-2, w, precondition=False, tol=1e-8)
    pre, info_q = _fit(Z, y, k, 1e-2, w, precondition=True, tol=1e-8)
    assert info_p.grad_max <= 1e-8 and info_q.grad_max <= 1e-8
    # strictly convex (alpha = 1e-2 bounds the Hessian below): a unique minimiser, and
    # a gradient below 1e-8 puts each solution within 1e-6 of it
    torch.testing.assert_close(pre.weight, plain.weight, rtol=0, atol=2e-6)
    # the softmax is unchanged by a common shift of the biases; they are unpenalised, so
    # only the data's curvature (smaller than alpha here) pins them down
    centred = (lambda b: b - b.mean()) if k > 1 else (lambda b: b)
    torch.testing.assert_close(centred(pre.bias), centred(plain.bias), rtol=0, atol=2e-5)
    # and the gradient there is zero by autograd too
    _, gW, gb = _autograd(Z, y, k, 1e-2, w, pre.weight.detach().T, pre.bias.detach())
    assert float(gW.abs().max()) < 1e-8 and float(gb.abs().max()) < 1e-8


def test_preconditioning_cuts_the_iterations_on_badly_conditioned_features(readout_problem):
    # overlapping classes, features with a large common mean and scales over two decades
    Z, y, _ = readout_problem(n=600, m=60, shift=3.0)
    _, plain = _fit(Z, y, 4, 1e-4, precondition=False, tol=1e-6, max_iter=3000)
    _, pre = _fit(Z, y, 4, 1e-4, precondition=True, tol=1e-6)
    assert pre.converged and pre.grad_max <= 1e-6
    assert pre.n_iter < plain.n_iter / 10


def test_preconditioner_maps_variables_and_gradients_consistently(readout_problem):
    Z, y, w = readout_problem(n=80, m=9)
    obj = ReadoutObjective(Z, y, 4, alpha=0.1, weight=w)
    pre = _Preconditioner(obj)
    g = torch.Generator().manual_seed(3)
    V = torch.randn(10, 4, generator=g, dtype=torch.float64)
    Wb = pre.to_weights(V)
    torch.testing.assert_close(pre.to_variables(Wb), V)
    # chain rule: d/dV f(R^-T V) = R^-1 grad_W f
    loss, gW, gb = obj(Wb[:9], Wb[9])
    Vr = V.clone().requires_grad_(True)
    Wr = torch.linalg.solve_triangular(pre.R.T, Vr, upper=True)
    ref = _autograd(Z, y, 4, 0.1, w, Wr[:9].detach(), Wr[9].detach())
    assert loss == pytest.approx(ref[0], rel=1e-12)
    torch.testing.assert_close(
        pre.gradient(torch.cat([gW, gb[None]])),
        torch.linalg.solve_triangular(pre.R, torch.cat([ref[1], ref[2][None]]), upper=False),
    )


def test_preconditioner_solves_again_only_for_new_variables(readout_problem):
    """The weights of the variables of the last solve come back without a solve, the same tensor; other
    variables (the same buffer changed in place, as scipy's) are solved again, to the bit of a fresh solve."""
    Z, y, w = readout_problem(n=80, m=9)
    pre = _Preconditioner(ReadoutObjective(Z, y, 4, alpha=0.1, weight=w))
    V = torch.randn(10, 4, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    Wb = pre.to_weights(V)
    assert pre.to_weights(V.clone()) is Wb
    V[3, 1] += 1e-9
    again = pre.to_weights(V)
    assert again is not Wb
    assert torch.equal(again, torch.linalg.solve_triangular(pre.R.T, V, upper=True))


def test_weights_equal_repeated_rows_at_a_tight_tolerance(readout_problem):
    Z, y, _ = readout_problem(n=120, m=30)
    reps = torch.from_numpy(np.random.default_rng(0).integers(0, 4, len(y)))
    keep = reps > 0
    Zr, yr = Z.repeat_interleave(reps, dim=0), y.repeat_interleave(reps)
    w = reps[keep].double()
    w = w * (keep.sum() / w.sum())
    a, _ = _fit(Z[keep], y[keep], 4, 1e-2, w, precondition=True, tol=1e-8)
    b, _ = _fit(Zr, yr, 4, 1e-2, precondition=True, tol=1e-8)
    torch.testing.assert_close(a.weight, b.weight, rtol=0, atol=2e-6)


def test_train_readout_runs_the_fused_solver_with_one_epoch_per_iteration(readout_problem):
    Z, y, w = readout_problem()
    lin = torch.nn.Linear(Z.shape[1], 4, dtype=torch.float64)
    with torch.no_grad():
        lin.weight.zero_()
        lin.bias.zero_()
    res = train_readout(lin, Z, y, sample_weight=w, max_epochs=500, alpha=1e-2, improvement_tol=1e-8)
    assert res.converged and res.n_epochs == len(res.history) > 1
    _, ref = _fit(Z, y, 4, 1e-2, w, tol=1e-9)
    losses = [h["train_loss"] for h in res.history]
    # stopped by L-BFGS-B's relative reduction test (2.2e-9) at the optimal loss
    assert losses[-1] == pytest.approx(ref.loss, rel=1e-7) and losses[-1] < losses[0]
    assert _autograd(Z, y, 4, 1e-2, w, lin.weight.detach().T, lin.bias.detach())[0] == pytest.approx(losses[-1])


def test_validation_stopping_restores_the_best_iterate_with_the_fused_solver(readout_problem):
    Z, y, _ = readout_problem(n=400)
    lin = torch.nn.Linear(Z.shape[1], 4, dtype=torch.float64)
    res = train_readout(
        lin,
        Z[:300],
        y[:300],
        X_val=Z[300:],
        y_val=y[300:],
        max_epochs=300,
        alpha=0.0,
        n_iter_no_change=3,
        improvement_tol=1e-3,
    )
    best = min(h["valid_loss"] for h in res.history)
    assert res.best_valid_loss == pytest.approx(best)
    with torch.no_grad():
        logits = lin(Z[300:].double())
    assert float(F.cross_entropy(logits, y[300:])) == pytest.approx(best, rel=1e-9)


def test_ridge_readout_solves_the_normal_equations(readout_problem):
    Z, y, w = readout_problem(n=90, m=12)
    W, b, loss = ridge_readout(ReadoutObjective(Z, y, 4, alpha=0.05, weight=w))
    T = 2.0 * F.one_hot(y, 4).double() - 1.0
    Z1 = torch.cat([Z, torch.ones(len(Z), 1, dtype=Z.dtype)], dim=1)
    P = torch.eye(13, dtype=torch.float64)
    P[12, 12] = 0.0
    A = Z1.T @ (Z1 * w[:, None]) / len(Z) + 0.05 * P
    ref = torch.linalg.solve(A, Z1.T @ (T * w[:, None]) / len(Z))
    torch.testing.assert_close(torch.cat([W, b[None]]), ref, rtol=1e-10, atol=1e-12)
    resid = Z1 @ ref - T
    expected = 0.5 * float(((resid * resid).sum(1) * w).mean()) + 0.025 * float((ref[:12] ** 2).sum())
    assert loss == pytest.approx(expected, rel=1e-12)


# ---------------------------------------------------------------------------
# readout='ridge' on the classifiers


def _digits(n=300):
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return X[:n], y[:n]


@pytest.mark.parametrize("weighted", [False, True])
def test_ridge_readout_equals_scikit_learn_ridge_on_the_same_features(weighted):
    from sklearn.linear_model import Ridge

    from sk_deq import MatchedExplicitClassifier

    X, y = _digits()
    sw = np.random.default_rng(0).uniform(0.2, 2.0, len(y)) if weighted else None
    clf = MatchedExplicitClassifier(
        "tanh", 0.2, n_hidden=64, readout="ridge", alpha=1e-3, dtype="float64", random_state=0
    ).fit(X, y, sample_weight=sw)
    Z = clf.features(X)
    T = np.where(y[:, None] == clf.classes_[None, :], 1.0, -1.0)
    # ours: 1/2 sum w_i ||r_i||^2 / sum w + alpha/2 ||W||^2  <=>  Ridge(alpha = alpha * sum w)
    total = len(y) if sw is None else sw.sum()
    ref = Ridge(alpha=1e-3 * total, solver="cholesky").fit(Z, T, sample_weight=sw)
    np.testing.assert_allclose(clf.module_.readout.weight.detach().numpy(), ref.coef_, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(clf.decision_function(X), ref.predict(Z), rtol=1e-7, atol=1e-9)
    assert clf.n_iter_ == 1 and clf.history_[0]["train_loss"] > 0


def test_ridge_readout_binary_uses_one_output_and_predicts_by_its_sign():
    from sk_deq import DEQClassifier

    X, y = _digits()
    yb = np.where(y < 5, "low", "high")
    clf = DEQClassifier(n_hidden=32, readout="ridge", random_state=0).fit(X, yb)
    d = clf.decision_function(X)
    assert d.shape == (len(y),)
    np.testing.assert_array_equal(clf.predict(X), np.where(d > 0, clf.classes_[1], clf.classes_[0]))
    assert clf.score(X, yb) > 0.8


def test_ridge_readout_has_no_probabilities_or_partial_fit_and_rejects_what_cannot_apply():
    from sk_deq import DEQClassifier, ExplicitClassifier

    X, y = _digits(100)
    clf = ExplicitClassifier(("tanh",), n_hidden=32, readout="ridge", random_state=0).fit(X, y)
    for method in ("predict_proba", "predict_log_proba", "partial_fit"):
        assert not hasattr(clf, method)
    with pytest.raises(AttributeError, match="predict_proba") as info:
        clf.predict_proba(X)
    assert "readout='ridge'" in str(info.value.__cause__)
    with pytest.raises(ValueError, match="trainable='readout'"):
        DEQClassifier(n_hidden=8, readout="ridge", trainable="all").fit(X, y)
    with pytest.raises(ValueError, match="early_stopping=False"):
        DEQClassifier(n_hidden=8, readout="ridge", early_stopping=True).fit(X, y)
    with pytest.raises(ValueError, match="readout"):
        DEQClassifier(n_hidden=8, readout="lasso").fit(X, y)


def test_readout_is_a_grid_searchable_parameter():
    from sklearn.model_selection import GridSearchCV

    from sk_deq import MatchedExplicitClassifier

    X, y = _digits(200)
    gs = GridSearchCV(MatchedExplicitClassifier(n_hidden=32, random_state=0), {"readout": ["logistic", "ridge"]}, cv=2)
    gs.fit(X, y)
    assert gs.best_params_["readout"] in {"logistic", "ridge"}
    assert np.all(np.isfinite(gs.cv_results_["mean_test_score"]))


def test_readout_on_one_and_two_threads_agrees_to_the_solvers_tolerance(readout_problem):
    """The readout's float32 products (and the preconditioner's Gram matrix) may sum in another order on another
    number of torch threads, and L-BFGS then stops at another point within its tolerance: the weights and the
    logits agree to 1e-3 of their largest entry, the loss to 1e-6; the same thread count gives the same bits."""
    Z, y, _ = readout_problem(n=1100, m=1000, k=5, dtype=torch.float32)
    assert ReadoutObjective(Z, y, 5).dtype == torch.float32  # large enough to keep its float32 products
    before = torch.get_num_threads()
    fits = []
    try:
        for threads in (1, 2, 1):
            torch.set_num_threads(threads)
            lin, res = _fit(Z, y, 5, 1e-3, tol=1e-6)
            fits.append((lin.weight.detach().clone(), res.loss))
    finally:
        torch.set_num_threads(before)
    (W1, loss1), (W2, loss2), (W1_again, loss1_again) = fits
    assert torch.equal(W1, W1_again) and loss1 == loss1_again
    # measured: weights 2.7e-4 of the largest, logits 1.2e-4 of the largest, loss 7.9e-8 relative
    assert float((W1 - W2).abs().max()) <= 1e-3 * float(W1.abs().max())
    L1, L2 = Z.double() @ W1.T, Z.double() @ W2.T
    assert float((L1 - L2).abs().max()) <= 1e-3 * float(L1.abs().max())
    assert loss2 == pytest.approx(loss1, rel=1e-6)
