"""Monte-Carlo kernels of random finite-width DEQs and explicit networks.

Averages over random networks (those of :ref:`theory-deq` and
:ref:`theory-explicit`), as in Ling et al.'s (2024) experiments:
:func:`monte_carlo_implicit_kernel` (also between two data sets),
:class:`MonteCarloDEQSampler` (fixed networks, features of any data set) and
:func:`monte_carlo_explicit_kernel`.  The DEQ features are found by Anderson
acceleration (:func:`anderson_fixed_point`).

Why a numpy Anderson here besides the torch one of :mod:`sk_deq.nn.solvers`:
not accuracy (in float64 the torch solver reaches the same fixed points to
its tolerance), but the layering.  ``kernels`` sits below ``nn`` and is
numpy only (``import sk_deq.kernels`` does not import torch; only a
``device`` brings in :mod:`sk_deq.kernels.torch_engine`), so it cannot call
up into ``nn``.  The two also solve different problems: here the whole
``m x n`` feature matrix is one vector with one residual, there every
sample is frozen on its own residual, on a device, for the DEQ layer's
forward and backward passes.  This one also serves the tests as a reference
written independently of the torch solver.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state

from .._validation import EXPLICIT_KERNELS, check_bool, check_kernel, check_tau0
from .._scaling import data_tau0, squared_norms
from ..activations import get_activation
from ..theory import deq_ck_coefficients, explicit_coefficients

__all__ = [
    "MonteCarloDEQSampler",
    "anderson_fixed_point",
    "monte_carlo_explicit_kernel",
    "monte_carlo_implicit_kernel",
]


def anderson_fixed_point(
    f, z0: np.ndarray, *, tol: float = 1e-8, max_iter: int = 500, memory: int = 5, beta: float = 1.0
):
    """Solve ``z = f(z)`` by Anderson acceleration (numpy, whole array as one vector).

    Each step mixes the last ``memory + 1`` iterates by the least-squares
    combination of their residuals; the iteration stops when the relative
    residual of the whole array falls below ``tol`` or is not finite.

    Parameters
    ----------
    f : callable
        The map, from an array of the shape of ``z0`` to one of the same shape.
    z0 : ndarray
        Starting point.
    tol : float, default=1e-8
        Relative residual ``||f(z) - z|| / ||f(z)||`` at which to stop.
    max_iter : int, default=500
        Largest number of evaluations of ``f``.
    memory : int, default=5
        Number of past differences used in each mixing step.
    beta : float, default=1.0
        Damping (mixing) parameter; 1 is undamped.

    Returns
    -------
    z : ndarray
        The last value ``f(z)``, of the shape of ``z0``.
    n_iter : int
        Evaluations of ``f`` used.
    rel_residual : float
        ``||f(z) - z|| / ||f(z)||`` at the last step (above ``tol`` when the
        budget ran out, non-finite when the iteration diverged).

    Examples
    --------
    >>> import numpy as np
    >>> from sk_deq.kernels import anderson_fixed_point
    >>> z, n_iter, res = anderson_fixed_point(np.cos, np.zeros(3), tol=1e-12)
    >>> z.round(6).tolist(), bool(res < 1e-12)
    ([0.739085, 0.739085, 0.739085], True)
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


def _mc_weights(rng, m: int, p: int, sigma_a2: float, dtype):
    """One random DEQ: ``A`` (m x m, variance sigma_a2) and ``B`` (m x p, N(0, 1))."""
    A = (math.sqrt(sigma_a2) * rng.standard_normal((m, m))).astype(dtype)
    B = rng.standard_normal((m, p)).astype(dtype)
    return A, B


def _mc_features(act, A, B, X, sigma_b2, center, *, dtype, tol, max_iter, derivative=False):
    """DEQ features ``Z`` (m x n) of the rows of ``X``, and ``Zdot = phi'(H) / sqrt(m)`` if asked."""
    m = A.shape[0]
    inv = 1.0 / math.sqrt(m)
    U = math.sqrt(sigma_b2) * (B @ np.asarray(X, dtype=float).T.astype(dtype))

    def f(Z):
        return (act(A @ Z + U) - center).astype(dtype) * inv

    Z, _, res = anderson_fixed_point(f, np.zeros((m, X.shape[0]), dtype=dtype), tol=tol, max_iter=max_iter)
    if not np.isfinite(res):
        raise ValueError("The DEQ diverged (non-finite features); try a smaller sigma_a2.")
    if res > tol:
        warnings.warn(
            f"DEQ fixed point not reached in {max_iter} iterations (relative residual {res:.2e}).",
            ConvergenceWarning,
            stacklevel=3,
        )
    Z = Z.astype(np.float64)
    if not derivative:
        return Z, None
    H = (A @ Z.astype(dtype) + U).astype(np.float64)
    return Z, act.derivative(H) * inv


def _mc_combine(kernel, sa, sb, ZX, ZY, DX, DY, XY):
    feat = ZX.T @ ZY
    if kernel == "ck":
        return sa * feat + sb * XY
    if kernel == "feature":
        return feat
    return feat / (1.0 - sa * (DX.T @ DY))


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
    Y=None,
) -> np.ndarray:
    """Average kernel of random finite-width DEQs.

    The DEQ is that of :ref:`theory-deq`; as the width grows the average
    tends to the exact kernels of :ref:`theory-exact` and :ref:`theory-ntk`.

    For each draw, ``A`` (m x m) and ``B`` (m x p) have ``N(0, 1)`` entries
    and the features solve ``Z = phi(sqrt(sigma_a2) A Z + sqrt(sigma_b2) B X^T) / sqrt(m)``
    with ``phi`` centred at the DEQ's ``tau`` for the data scale ``tau0``.

    Parameters
    ----------
    X : array-like of shape (n, p)
        Samples, one per row.
    activation : str, Activation or callable
        DEQ activation ``phi0``.
    sigma_a2 : float
        Recurrent weight variance in ``(0, 1)``.
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
    tol : float, default=1e-7
        Relative residual at which the fixed-point solve
        (:func:`anderson_fixed_point`) stops; a ``ConvergenceWarning`` is
        issued if it is not reached.
    max_iter : int, default=500
        Iteration budget of the fixed-point solve.
    random_state : int, RandomState instance or None, default=None
        Seed of the random weights.
    dtype : numpy dtype, default=float64
        Precision of the simulation (float32 is faster and less accurate).
    Y : array-like of shape (n_Y, p), optional
        Second data set: returns the cross kernel ``K(X, Y)``, the features of
        both sets computed by the same random networks (the draws are those
        of the square kernel of ``X`` for the same ``random_state``).

    Returns
    -------
    ndarray of shape (n, n) or (n, n_Y)
        The kernel averaged over the draws.

    Raises
    ------
    ValueError
        If the DEQ diverges (non-finite features), or ``Y`` has the wrong
        number of features.

    Examples
    --------
    >>> import numpy as np
    >>> from sk_deq.kernels import implicit_kernel, monte_carlo_implicit_kernel, relative_spectral_error
    >>> X = np.random.default_rng(0).standard_normal((20, 10)) / np.sqrt(10)
    >>> K_mc = monte_carlo_implicit_kernel(X, "relu", 0.2, n_hidden=500, random_state=0)
    >>> K_mc.shape
    (20, 20)
    >>> bool(relative_spectral_error(implicit_kernel(X), K_mc) < 0.1)
    True
    """
    check_kernel(kernel)
    X = np.asarray(X, dtype=float)
    t0 = data_tau0(X) if tau0 is None else check_tau0(tau0)
    act = get_activation(activation)
    coefs = deq_ck_coefficients(act, sigma_a2, t0, sigma_b2=sigma_b2)
    sa, sb, center = coefs.sigma_a2, coefs.sigma_b2, coefs.moments.mean
    rng = check_random_state(random_state)
    m = int(n_hidden)
    p = X.shape[1]
    if Y is not None:
        Y = np.asarray(Y, dtype=float)
        if Y.ndim != 2 or Y.shape[1] != p:
            raise ValueError(f"Y must have shape (n_Y, {p}), got {Y.shape}.")
    XY = X @ (X if Y is None else Y).T
    total = np.zeros(XY.shape)
    need_dot = kernel == "ntk"
    opts = dict(dtype=dtype, tol=tol, max_iter=max_iter, derivative=need_dot)
    for _ in range(int(n_draws)):
        A, B = _mc_weights(rng, m, p, sa, dtype)
        ZX, DX = _mc_features(act, A, B, X, sb, center, **opts)
        ZY, DY = (ZX, DX) if Y is None else _mc_features(act, A, B, Y, sb, center, **opts)
        total += _mc_combine(kernel, sa, sb, ZX, ZY, DX, DY, XY)
    return total / int(n_draws)


class MonteCarloDEQSampler:
    """Fixed random finite-width DEQs, to evaluate kernels between any data sets.

    The networks are drawn from per-draw seeds, so nothing of size
    ``n_hidden x n_hidden`` is kept between calls; :meth:`features` gives the
    DEQ features of any samples under the same networks.

    Parameters
    ----------
    activation : str, Activation or callable
        Activation ``phi0`` of the random DEQs.
    sigma_a2 : float
        Their recurrent weight variance, in ``(0, 1)``.
    tau0 : float
        Data scale fixing the centring constant (the training scale).
    n_features : int
        Input dimension ``p``.
    kernel : {'ck', 'feature', 'ntk'}, default='ck'
        Which kernel :meth:`kernel_from_features` forms (see
        :func:`monte_carlo_implicit_kernel`); ``'ntk'`` also keeps the
        derivative features.
    sigma_b2 : float, optional
        Input weight variance, ``1 - sigma_a2`` by default.
    n_hidden : int, default=2000
        Width ``m`` of every network.
    n_draws : int, default=1
        Number of independent networks averaged.
    tol : float, default=1e-7
        Relative residual at which each fixed-point solve stops.
    max_iter : int, default=500
        Iteration budget of each fixed-point solve.
    dtype : numpy dtype, default=float64
        Precision of the simulation.
    random_state : int, RandomState instance or None, default=None
        Seed of the per-draw seeds that generate the networks.

    Examples
    --------
    >>> import numpy as np
    >>> from sk_deq.kernels import MonteCarloDEQSampler
    >>> rng = np.random.default_rng(0)
    >>> X_train, X_new = rng.standard_normal((15, 8)) / np.sqrt(8), rng.standard_normal((3, 8)) / np.sqrt(8)
    >>> sampler = MonteCarloDEQSampler("tanh", 0.2, 1.0, n_features=8, n_hidden=300, random_state=0)
    >>> F_train, F_new = sampler.features(X_train), sampler.features(X_new)
    >>> sampler.kernel_from_features(F_new, F_train, X_new, X_train).shape
    (3, 15)
    """

    def __init__(
        self,
        activation,
        sigma_a2,
        tau0,
        n_features,
        *,
        kernel="ck",
        sigma_b2=None,
        n_hidden=2000,
        n_draws=1,
        tol=1e-7,
        max_iter=500,
        dtype=np.float64,
        random_state=None,
    ):
        check_kernel(kernel)
        self.act = get_activation(activation)
        co = deq_ck_coefficients(self.act, sigma_a2, tau0, sigma_b2=sigma_b2)
        self.sa, self.sb, self.center = co.sigma_a2, co.sigma_b2, co.moments.mean
        self.kernel = kernel
        self.p, self.m, self.n_draws = int(n_features), int(n_hidden), int(n_draws)
        self.tol, self.max_iter, self.dtype = tol, max_iter, dtype
        self.seeds = check_random_state(random_state).randint(0, 2**31 - 1, size=self.n_draws)

    def _weights(self, d):
        return _mc_weights(np.random.RandomState(self.seeds[d]), self.m, self.p, self.sa, self.dtype)

    def features(self, X, *, block_size=None):
        """DEQ features of the rows of ``X`` under every drawn network.

        Parameters
        ----------
        X : array-like of shape (n, n_features)
            Samples, one per row, scaled as the data ``tau0`` describes.
        block_size : int, optional
            Rows solved at a time (bounds memory); all rows at once by
            default.

        Returns
        -------
        list of tuple
            One ``(Z, Zdot)`` per draw: ``Z`` the features ``z*`` of shape
            (n, n_hidden), ``Zdot = phi'(pre-activation) / sqrt(m)`` of the
            same shape for ``kernel='ntk'`` and None otherwise.
        """
        X = np.asarray(X, dtype=float)
        squared_norms(X)  # a clear error where the inputs overflow, not a "diverged" DEQ
        b = len(X) if block_size is None else max(1, int(block_size))
        out = []
        for d in range(self.n_draws):
            A, B = self._weights(d)
            Zs, Ds = [], []
            for i0 in range(0, len(X), b):
                Z, D = _mc_features(
                    self.act,
                    A,
                    B,
                    X[i0 : i0 + b],
                    self.sb,
                    self.center,
                    dtype=self.dtype,
                    tol=self.tol,
                    max_iter=self.max_iter,
                    derivative=self.kernel == "ntk",
                )
                Zs.append(Z.T)
                Ds.append(None if D is None else D.T)
            out.append((np.vstack(Zs), None if Ds[0] is None else np.vstack(Ds)))
        return out

    def kernel_from_features(self, FX, FY, X, Y) -> np.ndarray:
        """Average over the draws of the kernel between two feature sets.

        Parameters
        ----------
        FX, FY : list of tuple
            Features of two data sets, from :meth:`features`.
        X : array-like of shape (n_X, n_features)
            The samples ``FX`` was computed from (for the ``sigma_b2 X Y^T``
            injection of the CK).
        Y : array-like of shape (n_Y, n_features)
            The samples ``FY`` was computed from.

        Returns
        -------
        ndarray of shape (n_X, n_Y)
            The kernel of :func:`monte_carlo_implicit_kernel`, averaged over
            the draws.
        """
        XY = np.asarray(X) @ np.asarray(Y).T
        total = np.zeros(XY.shape)
        for (ZX, DX), (ZY, DY) in zip(FX, FY):
            total += _mc_combine(
                self.kernel,
                self.sa,
                self.sb,
                ZX.T,
                ZY.T,
                None if DX is None else DX.T,
                None if DY is None else DY.T,
                XY,
            )
        return total / self.n_draws


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
    """Average CK or NTK of random finite-width explicit networks (see :ref:`theory-explicit`).

    ``y_0 = x``, ``y_l = (sigma_l(W_l y_{l-1}) - c_l) / sqrt(m)`` with
    ``N(0, 1)`` weights and ``c_l`` centring layer ``l`` at its input scale
    ``tau_{l-1}``.  The CK is ``Y_L^T Y_L``; the NTK is the finite-width
    Jacot recursion ``Theta_l = Y_l^T Y_l + Theta_{l-1} * (Ydot_l^T Ydot_l)``
    (readout and ``W_2..W_L``; ``W_1`` too when ``ntk_input_layer``).

    Parameters
    ----------
    X : array-like of shape (n, p)
        Samples, one per row.
    layers : sequence of str, Activation or callable
        Activations, first layer first.
    kernel : {'ck', 'ntk'}, default='ck'
        Which kernel.
    n_hidden : int, default=2000
        Width ``m`` of every layer.
    n_draws : int, default=1
        Number of independent networks averaged.
    tau0 : float, optional
        Data scale fixing the centring constants; measured from ``X`` by
        default.
    ntk_input_layer : bool, default=False
        Include the input layer's gradient in the NTK.
    random_state : int, RandomState instance or None, default=None
        Seed of the random weights.
    dtype : numpy dtype, default=float64
        Precision of the simulation.

    Returns
    -------
    ndarray of shape (n, n)
        The kernel averaged over the draws.
    """
    check_bool(ntk_input_layer, "ntk_input_layer", "monte_carlo_explicit_kernel")
    check_kernel(kernel, EXPLICIT_KERNELS)
    X = np.asarray(X, dtype=float)
    t0 = data_tau0(X) if tau0 is None else check_tau0(tau0)
    coefs = explicit_coefficients(layers, t0)
    centers = coefs.centers
    rng = check_random_state(random_state)
    m = int(n_hidden)
    inv = 1.0 / math.sqrt(m)
    n = X.shape[0]
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
