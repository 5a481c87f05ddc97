"""Degenerate or invalid settings: a sigma_b2 too small to carry the inputs, and parameters set after ``fit``.

* ``sigma_b2`` below :data:`sk_deq._validation.SIGMA_B2_MIN` warns wherever
  it is taken (one check, ``_validation.check_sigma_b2``): the estimators,
  transformers, kernels, theory and matching functions and the DEQ layer.
* Every parameter set with ``set_params`` after ``fit`` is checked by the
  methods that read it (``predict``, ``transform``, ``to_torch``, a kernel's
  call) as ``fit`` checks it: NaN, infinity and values out of range are
  errors naming the parameter, never NaN outputs.
"""

import math
import re
import warnings
from numbers import Integral

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits
from sklearn.utils._param_validation import Interval

import sk_deq
from sk_deq import ImplicitCKNystroem, ImplicitCKTransformer
from sk_deq.gaussian_process import ImplicitCKKernel
from sk_deq.kernels import (
    ImplicitKernelEngine,
    MonteCarloDEQSampler,
    implicit_kernel,
    implicit_kernel_diagonal,
    linearized_implicit_kernel,
    linearized_kernel_coefficients,
    monte_carlo_implicit_kernel,
)
from sk_deq.matching import match_explicit
from sk_deq.nn import DEQLayer
from sk_deq.theory import deq_ck_coefficients, deq_ntk_coefficients, implicit_kernel_entry, tau_fixed_point
from tests._networks import NETWORKS, small


@pytest.fixture(scope="module")
def data():
    X, y = load_digits(return_X_y=True)
    return X[:120], y[:120]


def _quiet(call, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return call(*args, **kwargs)


def _targets(est, y):
    return y if type(est).__name__.endswith("Classifier") else y.astype(float)


# ------------------------------------------------------------------ sigma_b2
_X5 = np.random.default_rng(0).standard_normal((6, 4))

#: Every public callable taking sigma_b2, called with it (DEQCoefficients and MatchResult only report it).
SIGMA_B2_TAKERS = {
    "DEQClassifier": lambda s: sk_deq.DEQClassifier(n_hidden=8, max_iter=2, sigma_b2=s).fit(_X5, [0, 1] * 3),
    "DEQRegressor": lambda s: sk_deq.DEQRegressor(n_hidden=8, max_iter=2, sigma_b2=s).fit(_X5, np.arange(6.0)),
    "MatchedExplicitClassifier": lambda s: sk_deq.MatchedExplicitClassifier(n_hidden=8, max_iter=2, sigma_b2=s).fit(
        _X5, [0, 1] * 3
    ),
    "MatchedExplicitRegressor": lambda s: sk_deq.MatchedExplicitRegressor(n_hidden=8, max_iter=2, sigma_b2=s).fit(
        _X5, np.arange(6.0)
    ),
    "ImplicitCKTransformer": lambda s: ImplicitCKTransformer(sigma_b2=s).fit(_X5),
    "ImplicitCKNystroem": lambda s: ImplicitCKNystroem(n_components=3, sigma_b2=s).fit(_X5),
    "ImplicitCKRidge": lambda s: sk_deq.ImplicitCKRidge(sigma_b2=s).fit(_X5, np.arange(6.0)),
    "ImplicitCKRidgeClassifier": lambda s: sk_deq.ImplicitCKRidgeClassifier(sigma_b2=s).fit(_X5, [0, 1] * 3),
    "ImplicitKernelEngine": lambda s: ImplicitKernelEngine("relu", 0.2, 1.0, sigma_b2=s),
    "implicit_kernel": lambda s: implicit_kernel(_X5, sigma_b2=s),
    "implicit_kernel_diagonal": lambda s: implicit_kernel_diagonal(_X5, sigma_b2=s),
    "linearized_implicit_kernel": lambda s: linearized_implicit_kernel(_X5, sigma_b2=s),
    "linearized_kernel_coefficients": lambda s: linearized_kernel_coefficients("relu", 0.2, 1.0, sigma_b2=s),
    "MonteCarloDEQSampler": lambda s: MonteCarloDEQSampler("relu", 0.2, 1.0, 4, sigma_b2=s, n_hidden=8),
    "monte_carlo_implicit_kernel": lambda s: monte_carlo_implicit_kernel(_X5, "relu", 0.2, n_hidden=8, sigma_b2=s),
    "TorchKernelSolver": None,  # the torch engine's blocks: built by ImplicitKernelEngine, which checks first
    "match_explicit": lambda s: match_explicit("relu", 0.2, 1.0, sigma_b2=s),
    "DEQLayer": lambda s: DEQLayer(4, 8, "relu", 0.2, 0.0, sigma_b2=s),
    "deq_ck_coefficients": lambda s: deq_ck_coefficients("relu", 0.2, 1.0, sigma_b2=s),
    "deq_ntk_coefficients": lambda s: deq_ntk_coefficients("relu", 0.2, 1.0, sigma_b2=s),
    "tau_fixed_point": lambda s: tau_fixed_point("relu", 0.2, 1.0, sigma_b2=s),
    "implicit_kernel_entry": lambda s: implicit_kernel_entry("relu", 0.2, 1.0, 1.0, 1.0, 0.5, sigma_b2=s),
}


def test_every_public_callable_taking_sigma_b2_is_listed():
    import importlib
    import inspect
    import pkgutil

    takers = set()
    for info in pkgutil.walk_packages(sk_deq.__path__, "sk_deq."):
        if any(part.startswith("_") for part in info.name.split(".")[1:]):
            continue
        module = importlib.import_module(info.name)
        for name in getattr(module, "__all__", []):
            obj = getattr(module, name)
            try:
                parameters = inspect.signature(obj.__init__ if inspect.isclass(obj) else obj).parameters
            except (TypeError, ValueError):
                continue
            if "sigma_b2" in parameters and name not in ("DEQCoefficients", "MatchResult"):
                takers.add(name)
    assert takers == set(SIGMA_B2_TAKERS)


def _sigma_b2_warnings(call, *args):
    """The messages of the sigma_b2 warnings of ``call(*args)`` (every other warning ignored)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call(*args)
    return [str(w.message) for w in caught if str(w.message).startswith("sigma_b2=")]


@pytest.mark.parametrize("name", [n for n, call in SIGMA_B2_TAKERS.items() if call is not None])
def test_a_sigma_b2_below_the_bound_warns_naming_it_and_the_bound_wherever_it_is_taken(name):
    call = SIGMA_B2_TAKERS[name]
    messages = _sigma_b2_warnings(call, 1e-6)
    assert messages and all(
        re.match(r"sigma_b2=1e-06 is below 0\.0001: the input term sigma_b2 \* tau0\^2", m) for m in messages
    )
    assert _sigma_b2_warnings(call, 1e-4) == _sigma_b2_warnings(call, None) == []  # the bound, the default


def test_below_the_bound_the_defaults_fit_to_chance_and_the_kernel_to_a_constant_as_the_warning_says():
    X, y = load_digits(return_X_y=True)
    (X, X_test), (y, y_test) = (X[:200], X[200:300]), (y[:200], y[200:300])
    sb = 1e-6
    chance = sk_deq.DEQClassifier(n_hidden=128, sigma_b2=sb, random_state=0)
    assert _sigma_b2_warnings(chance.fit, X, y)
    assert chance.n_iter_ == 1 and chance.score(X_test, y_test) < 0.4  # the readout stopped at its first step
    rescaled = sk_deq.DEQClassifier(n_hidden=128, sigma_b2=sb, tol=1e-12, alpha=0.0, max_iter=300, random_state=0)
    assert _sigma_b2_warnings(rescaled.fit, X, y)
    assert rescaled.score(X_test, y_test) > 0.85  # with tol and alpha scaled it fits: a warning, not an error
    transformer = ImplicitCKTransformer(sigma_b2=sb)
    assert _sigma_b2_warnings(transformer.fit, X)
    K = transformer.transform(X)
    assert np.ptp(K) < 10 * sb  # bias_variance=1 plus a data part of the scale of sigma_b2


# ----------------------------------------------------- parameters after fit
def _fitted_estimators(X, y):
    nets = [small(cls, max_iter=3) for cls in NETWORKS]
    transformers = [ImplicitCKTransformer(method=m) for m in ("exact", "linearized")]
    transformers.append(ImplicitCKTransformer(method="monte_carlo", n_hidden=40))
    transformers.append(ImplicitCKNystroem(n_components=10, random_state=0))
    fitted = [_quiet(est.fit, X, _targets(est, y)) for est in nets]
    return fitted + [est.fit(X) for est in transformers]


def _bad_values(constraints):
    """NaN, infinity and the values just outside every Interval among ``constraints`` (empty: none is numeric)."""
    intervals = [c for c in constraints if isinstance(c, Interval)]
    if not intervals:
        return []
    bad = [math.nan, math.inf, -math.inf]
    for c in intervals:
        step = 1 if c.type is Integral else 0.5
        if c.left is not None:
            bad.append(c.left - step if c.closed in ("left", "both") or c.type is Integral else c.left)
        if c.right is not None and math.isfinite(c.right):
            bad.append(c.right + step if c.closed in ("right", "both") or c.type is Integral else c.right)
    return bad


def _calls(est):
    if hasattr(est, "transform"):
        return [est.transform]
    return [est.predict, lambda X: est.to_torch()]


def test_every_numeric_parameter_set_out_of_range_after_fit_is_an_error_naming_it(data):
    X, y = data
    checked = 0
    for est in _fitted_estimators(X, y):
        for name, constraints in est._parameter_constraints.items():
            good = getattr(est, name)
            for bad in _bad_values(constraints):
                if any(isinstance(c, Interval) and c.is_satisfied_by(bad) for c in constraints):
                    continue  # another interval of the parameter takes it
                est.set_params(**{name: bad})
                for call in _calls(est):
                    with pytest.raises(ValueError, match=f"'{name}' parameter of {type(est).__name__}"):
                        _quiet(call, X[:5])
                    checked += 1
                est.set_params(**{name: good})
    assert checked > 200  # every network, transformer and numeric parameter was reached


def test_a_nan_bias_variance_set_after_fit_is_an_error_not_a_nan_kernel(data):
    X, _ = data
    for method in ("linearized", "monte_carlo"):
        est = ImplicitCKTransformer(method=method).fit(X).set_params(bias_variance=float("nan"))
        with pytest.raises(ValueError, match=re.escape("'bias_variance' parameter of ImplicitCKTransformer")):
            est.transform(X)


def test_the_kernel_checks_what_set_params_gives_it_at_every_call(data):
    X, _ = data
    for name, bad in (("sigma_a2", math.nan), ("tau0", math.inf), ("bias_variance", -1.0), ("n_jobs", 1.5)):
        kernel = ImplicitCKKernel().set_params(**{name: bad})
        for call in (kernel, kernel.diag):
            with pytest.raises(ValueError, match=name):
                call(X[:5])


def test_tolerances_and_rates_refuse_infinity_at_fit(data):
    X, y = data
    for name in ("tol", "alpha", "learning_rate_init", "fixed_point_tol"):
        with pytest.raises(ValueError, match=f"'{name}' parameter of DEQClassifier must be .* range"):
            sk_deq.DEQClassifier(**{name: math.inf}).fit(X, y)
    with pytest.raises(ValueError, match="'tol' parameter of ImplicitCKTransformer"):
        ImplicitCKTransformer(tol=math.inf).fit(X)
    with pytest.raises(ValueError, match="sigma_b2 must be positive and finite"):
        DEQLayer(4, 8, "relu", 0.2, 0.0, sigma_b2=math.inf)
    assert torch.is_tensor(DEQLayer(4, 8, "relu", 0.2, 0.0).A)
