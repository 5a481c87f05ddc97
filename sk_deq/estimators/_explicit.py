"""Explicit random-feature estimators with named activations: :class:`ExplicitClassifier`, :class:`ExplicitRegressor`."""

from __future__ import annotations

from typing import ClassVar

from .._torch_base import store_params
from .._torch_classifier import TorchClassifierBase
from .._torch_regressor import TorchRegressorBase
from ..activations import get_activation
from ..nn.explicit import ExplicitNet
from ..theory import explicit_coefficients
from ._docs import _explicit_doc

__all__ = ["ExplicitClassifier", "ExplicitNetwork", "ExplicitRegressor"]


class ExplicitNetwork:
    """An explicit random-feature network's features (a mixin); subclasses choose the layers."""

    def _coefficients(self, tau0):
        """The network's :class:`~sk_deq.theory.ExplicitCoefficients` at the scaled data scale ``tau0``."""
        raise NotImplementedError

    def _prepare(self, tau0):
        self.explicit_coefficients_ = coefs = self._coefficients(tau0)
        self.layers_ = tuple(coefs.layers)
        self.centers_ = tuple(float(c) for c in coefs.centers)

    def _describe_layers(self) -> str:
        """How the layers came about, for messages."""
        return f"layers={self.layers!r}"

    def _make_features(self, n_features, n_outputs, generator, dtype, device):
        L = len(self.layers_)
        if self.trainable == "hidden" and L == 1:
            raise ValueError(
                f"{type(self).__name__}: trainable='hidden' trains the weights W_2 .. W_L after the input layer, "
                f"but this network has a single layer ({self._describe_layers()}): it has no hidden weights, and "
                "only the readout would train. Use trainable='readout' (the same fit) or trainable='all' (which "
                "also trains the input layer W_1)."
            )
        m = int(self.n_hidden)
        self._check_network_fits([(m, int(n_features))] + [(m, m)] * (L - 1), n_features, n_outputs, device)
        if self.trainable == "readout":
            flags = [False] * L
        elif self.trainable == "hidden":
            flags = [False] + [True] * (L - 1)
        else:
            flags = [True] * L
        return ExplicitNet(
            n_features,
            int(self.n_hidden),
            self.layers_,
            self.centers_,
            trainable=flags,
            generator=generator,
            dtype=dtype,
            device=device,
        )


class _ExplicitLayers(ExplicitNetwork):
    """Layers named by the ``layers`` parameter."""

    _network_constraints: ClassVar[dict] = {"layers": [list, tuple]}
    _network_params: ClassVar[tuple] = ("layers",)

    def _coefficients(self, tau0):
        if len(self.layers) == 0:
            raise ValueError("layers must name at least one activation.")
        return explicit_coefficients(tuple(get_activation(a) for a in self.layers), tau0)


class ExplicitClassifier(_ExplicitLayers, TorchClassifierBase):
    __doc__ = _explicit_doc(
        "classifier",
        """    >>> from sklearn.datasets import load_digits
    >>> from sk_deq import ExplicitClassifier
    >>> X, y = load_digits(return_X_y=True)
    >>> clf = ExplicitClassifier(("relu", "relu"), n_hidden=256, random_state=0)
    >>> clf.fit(X[:1200], y[:1200]).score(X[1200:], y[1200:]) > 0.85
    True
    """,
    )

    _parameter_constraints: ClassVar[dict] = {
        **TorchClassifierBase._parameter_constraints,
        **_ExplicitLayers._network_constraints,
    }

    def __init__(
        self,
        layers=("relu",),
        *,
        n_hidden=1024,
        trainable="readout",
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


class ExplicitRegressor(_ExplicitLayers, TorchRegressorBase):
    __doc__ = _explicit_doc(
        "regressor",
        """    >>> from sklearn.datasets import make_friedman1
    >>> from sk_deq import ExplicitRegressor
    >>> X, y = make_friedman1(n_samples=1200, random_state=0)
    >>> reg = ExplicitRegressor(("relu", "relu"), n_hidden=256, random_state=0)
    >>> reg.fit(X[:1000], y[:1000]).score(X[1000:], y[1000:]) > 0.8
    True
    """,
    )

    _parameter_constraints: ClassVar[dict] = {
        **TorchRegressorBase._parameter_constraints,
        **_ExplicitLayers._network_constraints,
    }

    def __init__(
        self,
        layers=("relu",),
        *,
        n_hidden=1024,
        trainable="readout",
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
