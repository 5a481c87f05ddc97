"""The deep equilibrium estimators: :class:`DEQClassifier` and :class:`DEQRegressor`."""

from __future__ import annotations

from numbers import Integral, Real
from typing import ClassVar

from sklearn.utils._param_validation import Interval

from .._param_validation import ActivationName, SortedStrOptions
from .._torch_base import store_params
from .._torch_classifier import TorchClassifierBase
from .._torch_regressor import TorchRegressorBase
from ..activations import get_activation
from ..nn.deq import DEQLayer
from ..nn.solvers import SOLVERS
from ..theory import deq_ck_coefficients
from ._docs import _deq_doc

__all__ = ["DEQClassifier", "DEQRegressor"]


class _DEQNetwork:
    """The DEQ's features: its parameters and theory (a mixin before the task base)."""

    #: What defines the network besides the base's (a warm start keeps it: changing them is an error).
    _network_params: ClassVar[tuple] = ("activation", "sigma_a2")

    _network_constraints: ClassVar[dict] = {
        "activation": [ActivationName(), callable],
        "sigma_a2": [Interval(Real, 0, 1, closed="neither")],
        "solver": [SortedStrOptions(set(SOLVERS)), callable],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="neither")],
    }

    def _prepare(self, tau0):
        act = get_activation(self.activation)
        self.deq_coefficients_ = deq_ck_coefficients(act, self.sigma_a2, tau0)
        self.center_ = float(self.deq_coefficients_.moments.mean)

    def _make_features(self, n_features, n_outputs, generator, dtype, device):
        m = int(self.n_hidden)
        self._check_network_fits([(m, m), (m, int(n_features))], n_features, n_outputs, device)  # A and B
        return DEQLayer(
            n_features,
            int(self.n_hidden),
            get_activation(self.activation),
            float(self.sigma_a2),
            self.center_,
            solver=self.solver,
            tol=self.tol,
            max_iter=self.max_iter,
            train_a=self.trainable in ("hidden", "all"),
            train_b=self.trainable == "all",
            generator=generator,
            dtype=dtype,
            device=device,
        )

    def _sync_runtime_settings(self):
        layer = self.module_.features
        layer.solver = self.solver
        layer.tol = layer.backward_tol = float(self.tol)
        layer.max_iter = layer.backward_max_iter = int(self.max_iter)


class DEQClassifier(_DEQNetwork, TorchClassifierBase):
    __doc__ = _deq_doc(
        "classifier",
        """    >>> from sklearn.datasets import load_digits
    >>> from sk_deq import DEQClassifier
    >>> X, y = load_digits(return_X_y=True)
    >>> clf = DEQClassifier(n_hidden=256, random_state=0).fit(X[:1200], y[:1200])
    >>> clf.solver_info_["converged"]
    True
    >>> clf.score(X[1200:], y[1200:]) > 0.85
    True
    """,
    )

    _parameter_constraints: ClassVar[dict] = {
        **TorchClassifierBase._parameter_constraints,
        **_DEQNetwork._network_constraints,
    }

    def __init__(
        self,
        activation="relu",
        sigma_a2=0.2,
        *,
        n_hidden=1024,
        trainable="readout",
        solver="fixed_point",
        max_iter=50,
        tol=1e-4,
        input_scaling="global",
        readout="logistic",
        optimizer="auto",
        learning_rate="auto",
        alpha=1e-5,
        class_weight=None,
        batch_size="auto",
        max_epochs=200,
        early_stopping=False,
        validation_fraction=0.1,
        n_iter_no_change=10,
        improvement_tol=1e-4,
        warm_start=False,
        dtype="float32",
        device="auto",
        random_state=None,
        verbose=0,
    ):
        store_params(self, locals())


class DEQRegressor(_DEQNetwork, TorchRegressorBase):
    __doc__ = _deq_doc(
        "regressor",
        """    >>> from sklearn.datasets import make_friedman1
    >>> from sk_deq import DEQRegressor
    >>> X, y = make_friedman1(n_samples=1200, random_state=0)
    >>> reg = DEQRegressor(n_hidden=256, random_state=0).fit(X[:1000], y[:1000])
    >>> reg.solver_info_["converged"]
    True
    >>> reg.score(X[1000:], y[1000:]) > 0.8
    True
    """,
    )

    _parameter_constraints: ClassVar[dict] = {
        **TorchRegressorBase._parameter_constraints,
        **_DEQNetwork._network_constraints,
    }

    def __init__(
        self,
        activation="relu",
        sigma_a2=0.2,
        *,
        n_hidden=1024,
        trainable="readout",
        solver="fixed_point",
        max_iter=50,
        tol=1e-4,
        input_scaling="global",
        optimizer="auto",
        learning_rate="auto",
        alpha=1e-4,
        batch_size="auto",
        max_epochs=200,
        early_stopping=False,
        validation_fraction=0.1,
        n_iter_no_change=10,
        improvement_tol=1e-4,
        warm_start=False,
        dtype="float32",
        device="auto",
        random_state=None,
        verbose=0,
    ):
        store_params(self, locals())
