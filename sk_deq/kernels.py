"""Kernel matrices of DEQs and explicit networks (numpy only).

Monte-Carlo estimates from random finite-width networks, as in the paper's
experiments, and the relative spectral-norm error used to compare kernels
(SPEC §6).  Networks follow SPEC §1 and §4: weights ``N(0, 1)``, features
scaled by ``1/sqrt(m)``, no ``1/sqrt(p)`` on the input weights (inputs are
expected with ``||x||^2`` of order one), activations centred at their input
scale.
"""

from __future__ import annotations

import math
import warnings
from typing import Sequence

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state

from .activations import get_activation
from .theory import _check_tau0, deq_ck_coefficients, explicit_coefficients

__all__ = [
    "relative_spectral_error",
    "data_tau0",
    "anderson_fixed_point",
    "monte_carlo_implicit_kernel",
    "monte_carlo_explicit_kernel",
]


def relative_spectral_error(reference, other) -> float:
    """``||reference - other||_2 / ||reference||_2`` (spectral norms, SPEC §6)."""
    reference = np.asarray(reference, dtype=float)
    other = np.asarray(other, dtype=float)
    if reference.shape != other.shape:
        raise ValueError(f"Kernel shapes differ: {reference.shape} vs {other.shape}.")
    return float(np.linalg.norm(reference - other, 2) / np.linalg.norm(reference, 2))


def data_tau0(X) -> float:
    """Data scale ``tau0 = sqrt((1/n) sum ||x_i||^2)`` of samples in rows."""
    X = np.asarray(X, dtype=float)
    return _check_tau0(math.sqrt(float(np.mean(np.einsum("ij,ij->i", X, X)))))


def anderson_fixed_point(f, z0: np.ndarray, *, tol: float = 1e-8, max_iter: int = 500, memory: int = 5, beta: float = 1.0):
    """Solve ``z = f(z)`` by Anderson acceleration (numpy, whole array as one vector).

    Returns ``(z, n_iter, rel_residual)`` where ``rel_residual`` is
    ``||f(z) - z|| / ||f(z)||`` at the returned point.
    """
    z = z0
    shape = z0.shape
    Fs, Gs = [], []  # residual and value history (flattened)
    res = np.inf
    for it in range(1, max_iter + 1):
        g = f(z)
        r = (g - z).ravel()
        gn = np.linalg.norm(g)
        res = float(np.linalg.norm(r) / (gn if gn > 0 else 1.0))
        if not np.isfinite(res):
            return g, it, res
        if res < tol:
            return g, it, res
        Fs.append(r)
        Gs.append(g.ravel())
        if len(Fs) > memory + 1:
            Fs.pop(0)
            Gs.pop(0)
        if len(Fs) == 1:
            z = g
            continue
        dF = np.stack([Fs[i + 1] - Fs[i] for i in range(len(Fs) - 1)], axis=1)
        dG = np.stack([Gs[i + 1] - Gs[i] for i in range(len(Gs) - 1)], axis=1)
        gamma, *_ = np.linalg.lstsq(dF, r, rcond=None)
        z_new = g.ravel() - dG @ gamma
        if beta != 1.0:
            z_new = z_new - (1 - beta) * (r - dF @ gamma)
        z = z_new.reshape(shape)
    return f(z), max_iter, res


def monte_carlo_implicit_kernel(
    X,
    activation,
    sigma_a2: float,
    *,
    kernel: str = "ck",
    n_hidden: int = 2000,
    n_draws: int = 1,
    tau0: float | None = None,
    sigma_b2: float | None = None,
    tol: float = 1e-7,
    max_iter: int = 500,
    random_state=None,
    dtype=np.float64,
) -> np.ndarray:
    """Average kernel of random finite-width DEQs (SPEC §1, §3, §5).

    For each draw, ``A`` (m x m) and ``B`` (m x p) have ``N(0, 1)`` entries
    and the features solve ``Z = phi(sqrt(sigma_a2) A Z + sqrt(sigma_b2) B X^T) / sqrt(m)``
    with ``phi`` centred at the DEQ's ``tau`` for the data scale ``tau0``.

    Parameters
    ----------
    X : array of shape (n, p)
    activation : str, Activation or callable
    sigma_a2 : float
    kernel : {'ck', 'feature', 'ntk'}, default='ck'
        ``'ck'``: ``sigma_a2 Z^T Z + sigma_b2 X X^T`` (Implicit-CK ``G*``);
        ``'feature'``: ``Z^T Z``; ``'ntk'``: ``Z^T Z / (1 - sigma_a2 Zdot^T Zdot)``
        entrywise, ``Zdot = phi'(H) / sqrt(m)``.
    n_hidden : int, default=2000
        Width ``m``.
    n_draws : int, default=1
        Number of independent networks averaged.
    tau0 : float, optional
        Data scale for the centring; measured from ``X`` by default.
    sigma_b2 : float, optional
        ``1 - sigma_a2`` by default.
    tol, max_iter : float, int
        Fixed-point solver settings (relative residual).
    random_state : int, RandomState instance or None
    dtype : numpy dtype, default=float64
        Precision of the simulation (float32 is about twice as fast).

    Returns
    -------
    ndarray of shape (n, n)
    """
    if kernel not in ("ck", "feature", "ntk"):
        raise ValueError(f"kernel must be 'ck', 'feature' or 'ntk', got {kernel!r}.")
    X = np.asarray(X, dtype=float)
    t0 = data_tau0(X) if tau0 is None else _check_tau0(tau0)
    act = get_activation(activation)
    coefs = deq_ck_coefficients(act, sigma_a2, t0, sigma_b2=sigma_b2)
    sa, sb, center = coefs.sigma_a2, coefs.sigma_b2, coefs.moments.mean
    rng = check_random_state(random_state)
    m = int(n_hidden)
    n, p = X.shape
    Xt = X.T.astype(dtype)
    total = np.zeros((n, n))
    for _ in range(int(n_draws)):
        A = (math.sqrt(sa) * rng.standard_normal((m, m))).astype(dtype)
        U = math.sqrt(sb) * (rng.standard_normal((m, p)).astype(dtype) @ Xt)
        inv = 1.0 / math.sqrt(m)

        def f(Z):
            return (act(A @ Z + U) - center).astype(dtype) * inv

        Z, it, res = anderson_fixed_point(f, np.zeros((m, n), dtype=dtype), tol=tol, max_iter=max_iter)
        if not np.isfinite(res):
            raise ValueError(f"The DEQ diverged (non-finite features) at sigma_a2={sa:g}; try a smaller sigma_a2.")
        if res > tol:
            warnings.warn(
                f"DEQ fixed point not reached in {max_iter} iterations (relative residual {res:.2e}).",
                ConvergenceWarning,
                stacklevel=2,
            )
        Z = Z.astype(np.float64)
        feat = Z.T @ Z
        if kernel == "ck":
            total += sa * feat + sb * (X @ X.T)
        elif kernel == "feature":
            total += feat
        else:
            H = (A @ Z.astype(dtype) + U).astype(np.float64)
            D = act.derivative(H) * inv
            total += feat / (1.0 - sa * (D.T @ D))
    return total / int(n_draws)


def monte_carlo_explicit_kernel(
    X,
    layers: Sequence,
    *,
    kernel: str = "ck",
    n_hidden: int = 2000,
    n_draws: int = 1,
    tau0: float | None = None,
    ntk_input_layer: bool = False,
    random_state=None,
    dtype=np.float64,
) -> np.ndarray:
    """Average CK or NTK of random finite-width explicit networks (SPEC §4).

    ``y_0 = x``, ``y_l = (sigma_l(W_l y_{l-1}) - c_l) / sqrt(m)`` with
    ``N(0, 1)`` weights and ``c_l`` centring layer ``l`` at its input scale
    ``tau_{l-1}``.  The CK is ``Y_L^T Y_L``; the NTK is the finite-width
    Jacot recursion ``Theta_l = Y_l^T Y_l + Theta_{l-1} * (Ydot_l^T Ydot_l)``
    (readout and ``W_2..W_L``; ``W_1`` too when ``ntk_input_layer``).

    Parameters
    ----------
    X : array of shape (n, p)
    layers : sequence of str, Activation or callable
    kernel : {'ck', 'ntk'}
    n_hidden, n_draws, tau0, random_state, dtype
        As in :func:`monte_carlo_implicit_kernel`.
    ntk_input_layer : bool, default=False
        Include the input layer's gradient in the NTK.

    Returns
    -------
    ndarray of shape (n, n)
    """
    if kernel not in ("ck", "ntk"):
        raise ValueError(f"kernel must be 'ck' or 'ntk', got {kernel!r}.")
    X = np.asarray(X, dtype=float)
    t0 = data_tau0(X) if tau0 is None else _check_tau0(tau0)
    coefs = explicit_coefficients(layers, t0)
    centers = coefs.centers
    rng = check_random_state(random_state)
    m = int(n_hidden)
    inv = 1.0 / math.sqrt(m)
    n, p = X.shape
    total = np.zeros((n, n))
    for _ in range(int(n_draws)):
        Y = X.T.astype(dtype)
        theta = X @ X.T if ntk_input_layer else np.zeros((n, n))
        for act, c in zip(coefs.layers, centers):
            W = rng.standard_normal((m, Y.shape[0])).astype(dtype)
            H = W @ Y
            Y = ((act(H) - c) * inv).astype(dtype)
            if kernel == "ntk":
                D = act.derivative(H.astype(np.float64)) * inv
                Y64 = Y.astype(np.float64)
                theta = Y64.T @ Y64 + theta * (D.T @ D)
        if kernel == "ck":
            Y64 = Y.astype(np.float64)
            total += Y64.T @ Y64
        else:
            total += theta
    return total / int(n_draws)
