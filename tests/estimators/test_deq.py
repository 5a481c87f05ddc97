"""DEQClassifier's network (``sk_deq.estimators._deq``): its features are the fixed point, sigma_b2, the settings of
the solve, and the warnings and errors of a solve that does not converge."""

import math

import numpy as np
import pytest
import torch
from sklearn.exceptions import ConvergenceWarning

from sk_deq import DEQClassifier, MatchedExplicitClassifier
from sk_deq.activations import Activation
from sk_deq.theory import deq_ck_coefficients
from tests._networks import small


def test_deq_features_are_the_fixed_point_of_spec_map(blobs):
    X, y = blobs
    est = small(DEQClassifier, dtype="float64", fixed_point_tol=1e-10, fixed_point_max_iter=200).fit(X, y)
    Z = est.features(X)
    Xs = (X - est.input_mean_) / est.input_scale_
    A = est.module_.features.A.detach().numpy()
    B = est.module_.features.B.detach().numpy()
    c = est.deq_coefficients_.moments.mean
    H = math.sqrt(0.2) * Z @ A.T + math.sqrt(0.8) * Xs @ B.T
    np.testing.assert_allclose(Z, (np.maximum(H, 0) - c) / math.sqrt(32), rtol=1e-8, atol=1e-10)
    assert est.center_ == c and est.fixed_point_info_["converged"]


def test_fixed_point_settings_can_change_after_fit(blobs):
    X, y = blobs
    est = small(DEQClassifier, dtype="float64").fit(X, y)
    est.decision_function(X)
    loose = est.module_.features.forward_info.n_iter
    est.set_params(fixed_point_tol=1e-10, fixed_point_max_iter=300)
    est.decision_function(X)
    assert est.module_.features.forward_info.n_iter > loose
    assert est.module_.features.forward_info.rel_residual < 1e-10


def test_sigma_b2_sets_the_input_weight_variance_of_the_deq_and_its_match(blobs):
    # The features solve z = (phi(sqrt(sa2) A z + sqrt(sb2) B x) - c) / sqrt(m), checked here in float64
    # from the module's own weights; the centring constant and the match follow the theory at that sb2.
    X, y = blobs
    est = DEQClassifier(
        "relu",
        0.3,
        sigma_b2=0.5,
        n_hidden=64,
        dtype="float64",
        fixed_point_tol=1e-12,
        fixed_point_max_iter=500,
        random_state=0,
    ).fit(X, y)
    layer = est.module_.features
    assert layer.sigma_b2 == 0.5
    ref = deq_ck_coefficients("relu", 0.3, est.tau0_, sigma_b2=0.5)
    assert est.center_ == pytest.approx(ref.moments.mean, rel=1e-12)
    assert est.center_ != pytest.approx(deq_ck_coefficients("relu", 0.3, est.tau0_).moments.mean, rel=1e-6)
    Xs = torch.as_tensor((X - est.input_mean_) / est.input_scale_)
    Z = torch.as_tensor(est.features(X), dtype=torch.float64)
    A, B = layer.A.detach(), layer.B.detach()
    rhs = (torch.relu(0.3**0.5 * Z @ A.T + 0.5**0.5 * Xs @ B.T) - est.center_) / 64**0.5
    torch.testing.assert_close(Z, rhs, rtol=0, atol=1e-9)
    matched = MatchedExplicitClassifier("relu", 0.2, sigma_b2=0.5, n_hidden=32, random_state=0).fit(X, y)
    assert matched.match_.sigma_b2 == 0.5
    with pytest.raises(ValueError, match="sigma_b2"):
        DEQClassifier(sigma_b2=0.0).fit(X, y)


def test_unconverged_deq_warns_with_the_residual(blobs):
    X, y = blobs
    with pytest.warns(ConvergenceWarning, match=r"did not reach fixed_point_tol=1e-12 .* relative residual") as rec:
        est = small(DEQClassifier, fixed_point_max_iter=2, fixed_point_tol=1e-12).fit(X, y)
    assert any("150 of 150 samples" in str(w.message) for w in rec)
    # the advice names the settings of the solve, not max_iter and tol (those of training)
    advice = "Increase fixed_point_max_iter, loosen fixed_point_tol, or use a smaller sigma_a2."
    assert all(advice in str(w.message) for w in rec if "fixed-point" in str(w.message))
    assert not est.fixed_point_info_["converged"]
    with pytest.warns(ConvergenceWarning, match="during predict"):
        assert np.all(np.isfinite(est.predict_proba(X)))


def test_diverging_deq_is_an_error_suggesting_smaller_sigma_a2(blobs):
    X, y = blobs
    boom = Activation(np.tanh, "boom", torch_func=lambda t: 1e30 * t * t, odd=True)
    with pytest.raises(ValueError, match="smaller sigma_a2"):
        small(DEQClassifier, activation=boom, sigma_a2=0.5).fit(X, y)


def test_unstable_sigma_a2_is_rejected_by_the_theory(blobs):
    X, y = blobs
    growth = Activation(lambda t: np.sinh(3 * t), "sinh3", torch_func=lambda t: torch.sinh(3 * t), odd=True)
    with pytest.raises(ValueError, match="smaller sigma_a2"):
        small(DEQClassifier, activation=growth, sigma_a2=0.9).fit(X, y)
