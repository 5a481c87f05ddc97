"""Exact infinite-width kernels of explicit networks (see :ref:`theory-explicit`).

:func:`explicit_kernel` evaluates the CK (NNGP) or NTK of a stack of
closed-form layers, one dual-activation evaluation per layer and entry: each
layer's :class:`sk_deq.activations.DualFormula` (``activation.dual``).
"""

from __future__ import annotations

import numpy as np

from .._validation import EXPLICIT_KERNELS, check_kernel, check_samples, check_tau0
from .._scaling import data_tau0, squared_norms
from ..activations import Activation
from ..theory import explicit_coefficients
from .._runtime import CHUNK_ENTRIES, check_kernel_fits_in_memory

__all__ = ["explicit_kernel"]


def _layer_pair(act: Activation, c: float):
    """``pair(G, ai, aj) -> (F_c, D)`` of one layer centred at ``c``, from the activation's formula."""
    formula = act.dual
    if formula is None:
        raise NotImplementedError(
            f"explicit_kernel has closed forms for ReLU, leaky-ReLU, erf, GELU and quadratic layers and a "
            f"quadrature for hard-tanh layers, not for {act.name!r}."
        )

    def pair(G, ai, aj):
        return formula.centred_pair(G, ai, aj, c)

    return pair


def explicit_kernel(
    X, Y=None, *, layers, kernel: str = "ck", tau0: float | None = None, block_size: int | None = None
) -> np.ndarray:
    """Exact infinite-width CK (NNGP) or NTK of an explicit network.

    The network and both recursions are those of :ref:`theory-explicit`.

    ``y_0 = x``, ``y_l = (sigma_l(W_l y_{l-1}) - c_l) / sqrt(m)`` with ``c_l``
    centring layer ``l`` at its input scale ``tau_{l-1}`` for the data scale
    ``tau0`` (the conventions of :func:`sk_deq.theory.explicit_kernel_entry`,
    NTK with respect to the readout and ``W_2 .. W_L``).  Each layer is one
    closed-form dual evaluation per entry, so the cost is one matrix product
    plus ``L`` elementwise passes.

    Parameters
    ----------
    X : array-like of shape (n_samples_X, n_features)
        Samples, one per row.
    Y : array-like of shape (n_samples_Y, n_features), optional
        Second data set; ``K(X, X)`` (exactly symmetric) when omitted.
    layers : sequence of str or Activation
        ReLU, leaky-ReLU, hard-tanh, erf, GELU or quadratic layers, or any
        activation given a :class:`~sk_deq.activations.DualFormula`, first
        layer first (e.g. ``sk_deq.match_explicit(...).layers``).
    kernel : {'ck', 'ntk'}, default='ck'
        The CK ``Y_L^T Y_L`` (infinite width) or the NTK with respect to the
        readout and ``W_2 .. W_L``.
    tau0 : float, optional
        Data scale fixing the centring; measured from ``X`` by default.
    block_size : int, optional
        Rows per block (memory bound); by default as many rows as make
        about 262,144 entries.

    Returns
    -------
    ndarray of shape (n_samples_X, n_samples_Y)
        The kernel matrix.

    Raises
    ------
    NotImplementedError
        For a layer whose activation has no :class:`~sk_deq.activations.DualFormula`.

    Examples
    --------
    >>> import numpy as np
    >>> from sk_deq import match_explicit
    >>> from sk_deq.kernels import explicit_kernel, implicit_kernel, relative_spectral_error
    >>> X = np.random.default_rng(0).standard_normal((50, 20)) / np.sqrt(20)
    >>> layers = match_explicit("relu", 0.2, 1.0).layers
    >>> K = explicit_kernel(X, layers=layers, tau0=1.0)
    >>> K.shape
    (50, 50)
    >>> K_deq = implicit_kernel(X, activation="relu", sigma_a2=0.2, kernel="feature", tau0=1.0)
    >>> bool(relative_spectral_error(K_deq, K) < 0.05)
    True
    """
    check_kernel(kernel, EXPLICIT_KERNELS)
    X = check_samples(X)
    t0 = data_tau0(X) if tau0 is None else check_tau0(tau0)
    coefs = explicit_coefficients(layers, t0)
    pairs = [_layer_pair(act, c) for act, c in zip(coefs.layers, coefs.centers)]
    Yv = X if Y is None else check_samples(Y, "Y", n_features=X.shape[1])
    check_kernel_fits_in_memory(len(X), len(Yv))

    def diagonals(Z):
        a = squared_norms(Z)
        out = [a]
        for pair in pairs:
            F, _ = pair(a, a, a)
            a = np.maximum(F, 0.0)
            out.append(a)
        return out

    dx = diagonals(X)
    dy = dx if Y is None else diagonals(Yv)
    out = np.empty((len(X), len(Yv)))
    b = int(block_size) if block_size is not None else max(1, CHUNK_ENTRIES * 8 // max(1, len(Yv)))
    with np.errstate(invalid="ignore", divide="ignore"):
        for i0 in range(0, len(X), b):
            sl = slice(i0, i0 + b)
            S = X[sl] @ Yv.T
            theta = np.zeros_like(S)
            for layer, pair in enumerate(pairs):
                F, D = pair(S, dx[layer][sl, None], dy[layer][None, :])
                if kernel == "ntk":
                    theta = F + theta * D
                S = F
            out[sl] = S if kernel == "ck" else theta
    if Y is None:  # exactly symmetric: K[i, j] and K[j, i] integrate with the roles of u and v swapped
        out = 0.5 * (out + out.T)
    return out
