"""The explicit networks (``sk_deq.estimators._matched`` and ``_explicit``): the matched layers come from the match,
their coefficients, the cache of matches, and the matched network against the DEQ."""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from sk_deq import DEQClassifier, ExplicitClassifier, MatchedExplicitClassifier, make_gaussian_mixture
from sk_deq.activations import get_activation
from sk_deq.kernels import relative_spectral_error
from sk_deq.matching import match_explicit
from tests._networks import small


def test_matched_classifier_builds_its_layers_from_the_match(blobs):
    X, y = blobs
    est = small(MatchedExplicitClassifier).fit(X, y)
    assert est.match_.family == "leaky_relu" and est.match_.kernel == "ck"
    assert est.layers_ == tuple(est.match_.layers) and est.centers_ == tuple(est.match_.centers)
    net = est.module_.features
    assert [a.params for a in net.layers] == [a.params for a in est.match_.layers]
    tanh = small(MatchedExplicitClassifier, activation="tanh").fit(X, y)
    assert tanh.match_.family == "hard_tanh" and len(tanh.module_.features.weights) == 1
    ntk = small(MatchedExplicitClassifier, kernel="ntk").fit(X, y)
    assert len(ntk.module_.features.weights) == ntk.match_.n_layers >= 2
    quad = small(MatchedExplicitClassifier, family=["quadratic"], match_tol=None).fit(X, y)
    assert quad.match_.kinds == ("quadratic",) and len(quad.module_.features.weights) == 1


def test_explicit_coefficients_describe_the_fitted_layers(blobs):
    X, y = blobs
    plain = small(ExplicitClassifier, layers=("relu", "tanh")).fit(X, y)
    matched = small(MatchedExplicitClassifier, input_scaling="none").fit(X / 10, y)
    for est in (plain, matched):
        coefs = est.explicit_coefficients_
        assert tuple(coefs.layers) == est.layers_
        assert coefs.taus[0] == pytest.approx(est.tau0_)
        assert tuple(float(c) for c in coefs.centers) == est.centers_
    assert plain.explicit_coefficients_.taus[1] == pytest.approx(np.sqrt(get_activation("relu").moments(1.0).var))
    np.testing.assert_allclose(
        matched.explicit_coefficients_.kernel("ck").equations(), matched.match_.achieved.equations(), rtol=1e-12
    )


def test_refits_with_the_same_configuration_do_not_solve_the_matching_again(blobs):
    match_explicit.cache_clear()
    X, y = blobs
    first = small(MatchedExplicitClassifier, activation="tanh").fit(X, y)
    assert match_explicit.cache_info()[:2] == (0, 1)  # (hits, misses): solved once
    # the match depends on activation, sigma_a2, kernel, family, match_tol and the data scale only
    again = small(MatchedExplicitClassifier, activation="tanh", n_hidden=16, random_state=5).fit(X[::-1], y[::-1])
    first.fit(X, y)
    assert match_explicit.cache_info()[:2] == (2, 1)
    assert again.match_ is first.match_
    small(MatchedExplicitClassifier, activation="tanh", sigma_a2=0.3).fit(X, y)
    assert match_explicit.cache_info()[:2] == (2, 2)


@pytest.mark.heavy  # four networks of width 2000
def test_matched_gram_matrix_is_close_to_the_deq_gram_matrix():
    # theory page, 'What "equivalent" means in numbers', on the paper's GMM: the feature Gram matrix of the matched net is as
    # close to the DEQ's as that of a second DEQ drawn with another seed (the
    # finite-width noise), while a plain ReLU net of the same depth is far off.
    X, y = make_gaussian_mixture(320, 400, random_state=0)
    kw = dict(n_hidden=2000, input_scaling="none", max_iter=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        deqs = [DEQClassifier(random_state=s, **kw).fit(X, y) for s in (0, 1)]
        matched = MatchedExplicitClassifier(random_state=2, **kw).fit(X, y)
        plain = ExplicitClassifier(("relu", "relu"), random_state=2, **kw).fit(X, y)
    G_deq, G_deq2, G_matched, G_plain = [(lambda Z: Z @ Z.T)(e.features(X)) for e in (*deqs, matched, plain)]
    noise = relative_spectral_error(G_deq, G_deq2)
    assert noise < 0.25
    assert relative_spectral_error(G_deq, G_matched) < 1.4 * noise
    assert relative_spectral_error(G_deq, G_plain) > 2.5 * noise


def test_matched_accuracy_is_close_to_the_deq_accuracy(digits):
    X_tr, X_te, y_tr, y_te = digits
    kw = dict(n_hidden=512, random_state=0)
    acc_deq = DEQClassifier(**kw).fit(X_tr, y_tr).score(X_te, y_te)
    acc_matched = MatchedExplicitClassifier(**kw).fit(X_tr, y_tr).score(X_te, y_te)
    assert acc_deq > 0.93
    assert abs(acc_deq - acc_matched) <= 0.02
