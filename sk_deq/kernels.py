"""Kernel matrices of DEQs and explicit networks (numpy only).

Three ways to obtain the DEQ's Implicit-CK / feature kernel / Implicit-NTK
(SPEC §3, §5) as a plain function of the data, in the spirit of
neural-tangents:

* :func:`implicit_kernel`: the exact infinite-width fixed point of every
  entry (closed forms for ReLU / leaky ReLU, erf, GELU and quadratic
  activations; a Hermite (Mehler) expansion of the dual activation with a
  quadrature fallback for any other activation), computed block by block so
  that memory stays bounded, optionally in parallel through joblib;
* :func:`monte_carlo_implicit_kernel`: averages over random finite-width
  DEQs, as in the paper's experiments (also between two data sets, with the
  features of both computed by the same random networks);
* :func:`linearized_implicit_kernel`: the label-free high-dimensional
  equivalent of SPEC §3.

Also the relative spectral-norm error used to compare kernels (SPEC §6) and
Monte-Carlo kernels of explicit networks.  Networks follow SPEC §1 and §4:
weights ``N(0, 1)``, features scaled by ``1/sqrt(m)``, no ``1/sqrt(p)`` on
the input weights (inputs are expected with ``||x||^2`` of order one),
activations centred at their input scale.
"""

from __future__ import annotations

import contextlib
import math
import os
import warnings
from collections.abc import Sequence

import numpy as np
from joblib import Parallel, delayed, effective_n_jobs
from scipy import special
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from threadpoolctl import threadpool_limits

from ._inputs import EXPLICIT_KERNELS, check_kernel, check_samples, check_tau0, squared_norms
from . import activations as _acts
from .activations import Activation, HardTanh, LeakyReLU, Quadratic, get_activation
from .theory import deq_ck_coefficients, deq_ntk_coefficients, explicit_coefficients

__all__ = [
    "relative_spectral_error",
    "data_tau0",
    "anderson_fixed_point",
    "monte_carlo_implicit_kernel",
    "monte_carlo_explicit_kernel",
    "MonteCarloDEQSampler",
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
    return check_tau0(math.sqrt(float(np.mean(squared_norms(X)))))


def anderson_fixed_point(
    f, z0: np.ndarray, *, tol: float = 1e-8, max_iter: int = 500, memory: int = 5, beta: float = 1.0
):
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
    Y : array of shape (n_Y, p), optional
        Second data set: returns the cross kernel ``K(X, Y)``, the features of
        both sets computed by the same random networks (the draws are those
        of the square kernel of ``X`` for the same ``random_state``).

    Returns
    -------
    ndarray of shape (n, n) or (n, n_Y)
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
    activation, sigma_a2, tau0, sigma_b2
        As in :func:`monte_carlo_implicit_kernel`.
    n_features : int
        Input dimension ``p``.
    n_hidden, n_draws, tol, max_iter, dtype
        As in :func:`monte_carlo_implicit_kernel`.
    random_state : int, RandomState instance or None
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
        """Per draw, ``(Z, Zdot)`` of shape (n, n_hidden) each (``Zdot`` only for the NTK)."""
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
        """Average over the draws of the kernel between two feature sets."""
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


# ===========================================================================
# Exact infinite-width implicit kernels (SPEC §3, §5)
#
# Every entry is a scalar fixed point.  With a_i = G*_ii (the diagonal fixed
# point of sample i, a function of ||x_i||^2 only), s_ij = sqrt(a_i a_j) and
# the correlation rho_ij = G*_ij / s_ij, the off-diagonal equation reads
#
#     s rho - sigma_a2 F_c(s rho; a_i, a_j) - sigma_b2 x_i^T x_j = 0,
#
# F_c(G) = E[(phi0(u) - c)(phi0(v) - c)] with (u, v) ~ N(0, [[a_i, G], [G, a_j]])
# and c the centring constant fixed by the training scale tau0.  Its
# derivative in G is E[phi0'(u) phi0'(v)] (Price's theorem), which is also
# the Sigma-dot of the Implicit-NTK.  The left-hand side is increasing in rho
# wherever sigma_a2 E[phi0'(u) phi0'(v)] < 1, so a safeguarded Newton
# iteration on rho in [-1, 1] finds the root.
# ===========================================================================

_SQRT_2PI = math.sqrt(2.0 * math.pi)
_INV_SQRT_2PI = 1.0 / _SQRT_2PI
_XI_MAX = 11.0
_GL_X, _GL_W = np.polynomial.legendre.leggauss(20)

#: Largest Hermite degree of the generic (Mehler) dual activation.
MEHLER_MAX_DEGREE = 256

__all__ += [
    "implicit_kernel",
    "implicit_kernel_diagonal",
    "linearized_implicit_kernel",
    "linearized_kernel_coefficients",
    "check_kernel_fits_in_memory",
    "ImplicitKernelEngine",
    "explicit_kernel",
]


# ---------------------------------------------------------------------------
# memory policy


def _available_memory_bytes() -> int | None:
    """Physical memory currently available (Linux ``MemAvailable``), or None."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def check_kernel_fits_in_memory(n_rows: int, n_cols: int, *, itemsize: int = 8, available: int | None = None) -> int:
    """Raise ``MemoryError`` naming the size when a kernel matrix cannot be allocated.

    Called before anything of size ``n_rows x n_cols`` is allocated.

    Parameters
    ----------
    n_rows, n_cols : int
        Shape of the kernel matrix.
    itemsize : int, default=8
        Bytes per entry (float64).
    available : int, optional
        Bytes available; measured from the operating system by default.

    Returns
    -------
    nbytes : int
        Size of the matrix in bytes.
    """
    nbytes = int(n_rows) * int(n_cols) * int(itemsize)
    avail = _available_memory_bytes() if available is None else int(available)
    if avail is not None and nbytes > avail:
        raise MemoryError(
            f"The kernel matrix of shape ({n_rows}, {n_cols}) needs {nbytes / 2**30:.3g} GiB "
            f"({nbytes} bytes of float64), more than the {avail / 2**30:.3g} GiB of memory available. "
            "Transform fewer samples at a time (the rows of a kernel are independent), or fit on "
            "fewer samples."
        )
    return nbytes


def _auto_block_size(n_workers: int, entry_bytes: int = 160) -> int:
    """Rows (= columns) per block so that all workers' temporaries fit in
    scikit-learn's ``working_memory`` (MiB, ``sklearn.set_config``)."""
    from sklearn import get_config

    budget = float(get_config().get("working_memory", 1024)) * 2**20
    b = int(math.sqrt(budget / (max(1, n_workers) * entry_bytes)))
    return int(min(512, max(64, b)))


# ---------------------------------------------------------------------------
# per-sample Gaussian quadrature (vectorised over samples)


def _base_xi_edges() -> np.ndarray:
    # panel edges in xi: graded towards 0 (resolves phi(t xi) for large t),
    # half-unit panels up to |xi| = 8 (Hermite functions up to degree ~300),
    # unit panels beyond.
    inner = np.array([1 / 64, 1 / 32, 1 / 16, 1 / 8, 1 / 4])
    mid = np.arange(0.5, 8.0 + 0.25, 0.5)
    outer = np.arange(9.0, _XI_MAX + 0.5, 1.0)
    pos = np.concatenate([inner, mid, outer])
    return np.concatenate([-pos[::-1], [0.0], pos])


_BASE_EDGES = _base_xi_edges()


def _gl_on_edges(edges: np.ndarray):
    lo, hi = edges[..., :-1], edges[..., 1:]
    half = 0.5 * (hi - lo)
    mid = 0.5 * (hi + lo)
    xi = (mid[..., None] + half[..., None] * _GL_X).reshape(*edges.shape[:-1], -1)
    w = (half[..., None] * _GL_W).reshape(*edges.shape[:-1], -1) * _INV_SQRT_2PI * np.exp(-0.5 * xi * xi)
    return xi, w


_COMMON_XI, _COMMON_W = _gl_on_edges(_BASE_EDGES)


def _sample_nodes(scale: np.ndarray, breakpoints: tuple) -> tuple[np.ndarray, np.ndarray]:
    """Nodes ``xi`` and weights with ``sum(w * h(xi)) ~= E[h(xi)]`` per sample.

    Returns arrays of shape ``(1, Q)`` (shared) when every breakpoint of
    ``h(scale_i * xi)`` sits at 0, else ``(n, Q)`` with the breakpoints
    ``b / scale_i`` as extra panel edges.
    """
    bps = np.array([b for b in breakpoints if b != 0.0], dtype=float)
    if bps.size == 0:
        return _COMMON_XI[None, :], _COMMON_W[None, :]
    scale = np.asarray(scale, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        mapped = bps[None, :] / scale[:, None]
    mapped = np.nan_to_num(mapped, nan=_XI_MAX, posinf=_XI_MAX, neginf=-_XI_MAX)
    mapped = np.clip(mapped, -_XI_MAX, _XI_MAX)
    edges = np.sort(
        np.concatenate([np.broadcast_to(_BASE_EDGES, (len(scale), len(_BASE_EDGES))), mapped], axis=1), axis=1
    )
    return _gl_on_edges(edges)


def _hermite_table(xi: np.ndarray, degree: int) -> np.ndarray:
    """Normalised probabilists' Hermite polynomials ``He_k(xi) / sqrt(k!)``, k = 0..degree, last axis."""
    H = np.empty(xi.shape + (degree + 1,))
    H[..., 0] = 1.0
    if degree >= 1:
        H[..., 1] = xi
    for k in range(1, degree):
        H[..., k + 1] = (xi * H[..., k] - math.sqrt(k) * H[..., k - 1]) / math.sqrt(k + 1)
    return H


# ---------------------------------------------------------------------------
# vectorised root finding


def _safeguarded_newton(
    fun,
    rho: np.ndarray,
    *,
    tol: float,
    max_iter: int = 100,
    what: str = "kernel",
    strict: bool = True,
    full: bool = False,
):
    """Root in [-1, 1] of increasing functions, entrywise.

    ``fun(rho) -> (g, dg, *extra)``.  Newton steps that leave the current
    bracket are replaced by bisection.  With ``full=True`` also returns the
    last evaluation ``(g, dg, *extra)`` and the last step, so callers can
    correct values computed at the previous iterate to first order instead
    of evaluating again.
    """
    rho = np.clip(rho, -1.0, 1.0)
    lo = np.full_like(rho, -1.0)
    hi = np.full_like(rho, 1.0)
    delta = np.inf
    for _ in range(max_iter):
        ev = fun(rho)
        g, dg = ev[0], ev[1]
        neg = g < 0
        np.copyto(lo, rho, where=neg)
        np.copyto(hi, rho, where=~neg)
        new = g / dg
        np.subtract(rho, new, out=new)
        ok = (new >= lo) & (new <= hi)
        if not ok.all():
            new = np.where(ok, new, 0.5 * (lo + hi))
        step = new - rho
        delta = float(np.max(np.abs(step))) if new.size else 0.0
        rho = new
        if delta <= tol:
            return (rho, ev, step) if full else rho
    if strict:
        raise ValueError(
            f"The {what} fixed point did not converge (last correlation step {delta:.2e}); the DEQ "
            "kernel recursion may not be contracting at this sigma_a2."
        )
    return (rho, ev, step) if full else rho


def _newton(fun, rho: np.ndarray, *, tol: float, max_iter: int = 30, strict: bool = True, full: bool = False):
    """Entrywise Newton iteration clipped to [-1, 1]; falls back to the
    bracketed :func:`_safeguarded_newton` (from the same start) when it does
    not converge in ``max_iter`` steps.  Same returns as that function.

    Newton converges quadratically: after a step ``delta`` the error is about
    ``C delta^2`` with ``C = |g'' / (2 g')|`` (below 0.2 for the kernel
    equations, whose curvature carries a factor sigma_a2).  The iteration
    therefore stops once ``max |delta| <= 0.1 sqrt(tol)`` (or ``tol``,
    whichever is larger), which leaves an error below ``tol / 100``.
    """
    start = np.clip(rho, -1.0, 1.0)
    rho = start
    stop = max(tol, 0.1 * math.sqrt(tol))
    for _ in range(max_iter):
        ev = fun(rho)
        new = ev[0] / ev[1]
        np.subtract(rho, new, out=new)
        np.clip(new, -1.0, 1.0, out=new)
        step = new - rho
        delta = float(np.max(np.abs(step))) if step.size else 0.0
        if not np.isfinite(delta):
            break
        rho = new
        if delta <= stop:
            return (rho, ev, step) if full else rho
    if not strict and np.isfinite(delta):
        return (rho, ev, step) if full else rho
    return _safeguarded_newton(fun, start, tol=tol, strict=strict, full=full)


def _vector_fixed_point(update, x0: np.ndarray, *, tol: float = 1e-15, max_iter: int = 10_000) -> np.ndarray:
    """Solve ``x = update(x)`` entrywise for a contraction.

    Stops when every relative step ``|dx| / |x|`` is below ``tol`` or, where
    rounding keeps the steps above it, once they stop shrinking below
    ``1e-9`` (the iteration has reached the precision of ``update``).
    """
    x = np.asarray(x0, dtype=float)
    last = np.inf
    for _ in range(max_iter):
        new = update(x)
        if not np.all(np.isfinite(new)) or np.any(np.abs(new) > 1e12 * np.maximum(1.0, np.abs(x0))):
            raise ValueError(
                "The diagonal kernel fixed point diverges: the DEQ has no stable pre-activation scale "
                "for these inputs. Try a smaller sigma_a2 or smaller inputs."
            )
        # Relative: kernel values keep their precision at every data scale.
        with np.errstate(divide="ignore", invalid="ignore"):
            step = np.where(new != x, np.abs(new - x) / np.abs(new), 0.0)
        worst = float(np.max(step)) if step.size else 0.0
        if worst <= tol or (worst <= 1e-9 and worst >= last):
            return new
        last = worst
        x = new
    raise ValueError(
        f"The diagonal kernel fixed point did not converge in {max_iter} steps (last relative step "
        f"{last:.2e}); try a smaller sigma_a2."
    )


# ---------------------------------------------------------------------------
# per-sample state


class _Samples:
    """Per-sample quantities a kernel block needs (sliceable by rows)."""

    def __init__(self, **arrays):
        self.arrays = arrays

    def __getattr__(self, name):
        try:
            return self.__dict__["arrays"][name]
        except KeyError:
            raise AttributeError(name) from None

    def take(self, rows: slice) -> _Samples:
        return _Samples(**{k: v[rows] for k, v in self.arrays.items()})

    def __len__(self):
        return len(self.arrays["n_sq"])


# ---------------------------------------------------------------------------
# dual activations


_CHUNK_ENTRIES = 32768  # elementwise work is done on row chunks of about this many entries


class _Dual:
    """Interface: per-sample preparation and the block solve of one activation.

    :meth:`block` forms the inner products of a block with one matrix
    product, then solves the entries in row chunks small enough for the
    elementwise work to stay in cache.
    """

    name = "generic"

    def __init__(self, act: Activation, sa: float, sb: float, c: float, tol: float):
        self.act, self.sa, self.sb, self.c, self.tol = act, sa, sb, c, tol

    def diagonal(self, n_sq: np.ndarray) -> np.ndarray:  # pragma: no cover - interface
        raise NotImplementedError

    def prepare(self, X: np.ndarray) -> _Samples:
        X = np.ascontiguousarray(X, dtype=np.float64)
        n_sq = squared_norms(X)
        a = self.diagonal(n_sq)
        return _Samples(X=X, n_sq=n_sq, a=a, s=np.sqrt(a), **self.extra(X, n_sq, a))

    def extra(self, X, n_sq, a) -> dict:
        return {}

    def diagonal_values(self, S: _Samples, kernel: str) -> np.ndarray:
        """Exact diagonal ``K(x_i, x_i)``."""
        sa, sb = self.sa, self.sb
        if kernel == "ck":
            return S.a.copy()
        feat = (S.a - sb * S.n_sq) / sa
        if kernel == "feature":
            return feat
        return feat / (1.0 - sa * self.dot_at_diagonal(S))

    def dot_at_diagonal(self, S: _Samples) -> np.ndarray:  # pragma: no cover - interface
        raise NotImplementedError

    def gram(self, R: _Samples, C: _Samples) -> np.ndarray:
        return R.X @ C.X.T

    def block(self, R: _Samples, C: _Samples, kernel: str) -> np.ndarray:
        P = self.gram(R, C)
        nr, nc = P.shape
        step = max(1, _CHUNK_ENTRIES // max(nc, 1))
        if step >= nr:
            return self.chunk(P, R, C, kernel)
        out = np.empty_like(P)
        for i0 in range(0, nr, step):
            sl = slice(i0, i0 + step)
            out[sl] = self.chunk(P[sl], R.take(sl), C, kernel)
        return out

    def chunk(self, P, R, C, kernel):  # pragma: no cover - interface
        raise NotImplementedError


class _ClosedFormDual(_Dual):
    """Activations whose dual ``E[phi0(u) phi0(v)]`` has a closed form."""

    def pre(self, ai, aj) -> dict:
        """Entry-wise quantities that do not change during the Newton iteration."""
        return {"ai": ai, "aj": aj}

    def pair(self, G, pre):
        """``(E[phi0(u) phi0(v)], E[phi0'(u) phi0'(v)])`` for covariance G."""
        raise NotImplementedError  # pragma: no cover

    def mean(self, a):
        raise NotImplementedError  # pragma: no cover

    def diagonal(self, n_sq):
        sa, sb, c = self.sa, self.sb, self.c

        def update(a):
            a = np.maximum(a, 0.0)
            F, _ = self.pair(a, self.pre(a, a))
            return sa * (F - 2.0 * c * self.mean(a) + c * c) + sb * n_sq

        return _vector_fixed_point(update, sb * n_sq + sa * c * c + 1e-300)

    def extra(self, X, n_sq, a):
        return {"m": self.mean(a)}

    def dot_at_diagonal(self, S):
        return self.pair(S.a, self.pre(S.a, S.a))[1]

    def chunk(self, P, R, C, kernel):
        sa, sb, c = self.sa, self.sb, self.c
        pre = self.pre(R.a[:, None], C.a[None, :])
        s = R.s[:, None] * C.s[None, :]
        shift = c * c - c * (R.m[:, None] + C.m[None, :])
        rhs = sb * P
        rhs += sa * shift
        zero = s <= 1e-300
        if zero.any():
            s = np.where(zero, 1.0, s)

        def fun(rho):
            G = s * rho
            F, D = self.pair(G, pre)
            g = F * -sa
            g += G
            g -= rhs
            dg = D * -sa
            dg += 1.0
            dg *= s
            return g, dg, F, D

        g0, dg0, _, _ = fun(np.zeros_like(P))
        rho0 = -g0 / dg0
        rho, (_, _, F, D), step = _newton(fun, rho0, tol=self.tol, full=True)
        if kernel == "ntk":  # E[phi' phi'] at the returned iterate
            F, D = self.pair(s * rho, pre)
        else:  # move the last evaluation to the returned iterate
            F += D * (s * step)
        if zero.any():
            rho[zero] = 0.0
        if kernel == "ck":
            G = s * rho
            if zero.any():
                F0, _ = self.pair(np.zeros_like(G), pre)
                G[zero] = (sa * (F0 + shift) + sb * P)[zero]
            return G
        F += shift
        if kernel == "feature":
            return F
        D *= -sa
        D += 1.0
        F /= D
        return F


class _ErfDual(_ClosedFormDual):
    """``erf``: the arcsine kernel ``(2/pi) arcsin(2G / sqrt((1 + 2a)(1 + 2b)))``."""

    name = "erf (closed form)"

    def pre(self, ai, aj):
        q = np.sqrt((1.0 + 2.0 * ai) * (1.0 + 2.0 * aj))
        return {"inv_q2": 2.0 / q, "q2sq": (q * q) / 4.0}

    def pair(self, G, pre):
        z = G * pre["inv_q2"]
        np.clip(z, -1.0, 1.0, out=z)
        F = np.arcsin(z)
        F *= 2.0 / math.pi
        R = np.subtract(pre["q2sq"], G * G)
        np.maximum(R, 1e-300, out=R)
        np.sqrt(R, out=R)
        D = np.divide(2.0 / math.pi, R)
        return F, D

    def mean(self, a):
        return np.zeros_like(a)


class _GeluDual(_ClosedFormDual):
    """GELU ``x Phi(x)``: closed form from Stein's lemma.

    With ``Q = (1 + a)(1 + b)`` and ``R = Q - G^2``::

        E[gelu(u) gelu(v)] = G (1/4 + arcsin(G / sqrt(Q)) / (2 pi))
                             + (a b Q + G^2 (1 - a b)) / (2 pi Q sqrt(R))

    and its derivative in ``G`` is ``E[gelu'(u) gelu'(v)]`` (Price's theorem).
    """

    name = "gelu (closed form)"

    def pre(self, ai, aj):
        Q = (1.0 + ai) * (1.0 + aj)
        ab = ai * aj
        return {
            "Q": Q,
            "inv_sqQ": 1.0 / np.sqrt(Q),
            "abQ": ab * Q,
            "one_m_ab": 1.0 - ab,
            "inv_2piQ": 1.0 / (2.0 * math.pi * Q),
        }

    def pair(self, G, pre):
        G2 = G * G
        R = np.subtract(pre["Q"], G2)
        np.maximum(R, 1e-300, out=R)
        sqR = np.sqrt(R)
        z = G * pre["inv_sqQ"]
        np.clip(z, -1.0, 1.0, out=z)
        base = np.arcsin(z)
        base *= 1.0 / (2.0 * math.pi)
        base += 0.25  # 1/4 + arcsin / (2 pi)
        t = G2 * pre["one_m_ab"]  # G^2 (1 - ab)
        N = t + pre["abQ"]
        N *= pre["inv_2piQ"]  # N / (2 pi Q)
        F = G * base
        F += N / sqR
        # D = base + G / (2 pi sqR) + G (2 (1 - ab) R + N) / (2 pi Q R sqR)
        D = (2.0 * pre["one_m_ab"] * pre["inv_2piQ"]) * R
        D += N
        D *= G
        D /= R
        D += G * (1.0 / (2.0 * math.pi))
        D /= sqR
        D += base
        return F, D

    def mean(self, a):
        return a / np.sqrt(2.0 * math.pi * (1.0 + a))


class _QuadraticDual(_ClosedFormDual):
    """``c2 x^2 + c1 x``: ``E = c2^2 (a b + 2 G^2) + c1^2 G``."""

    name = "quadratic (closed form)"

    def pre(self, ai, aj):
        return {"ab": ai * aj}

    def pair(self, G, pre):
        c2, c1 = self.act.c2, self.act.c1
        return c2 * c2 * (pre["ab"] + 2.0 * G * G) + c1 * c1 * G, 4.0 * c2 * c2 * G + c1 * c1

    def mean(self, a):
        return self.act.c2 * a


class _ReluDual(_Dual):
    """Leaky ReLU ``max(alpha x, beta x)`` (ReLU: ``alpha = 1, beta = 0``).

    Positive homogeneity makes the correlation equation universal::

        h(rho) = (1 - sa ab) rho - sa (alpha - beta)^2 kappa(rho) = r_ij,
        kappa(rho) = (sin t + (pi - t) cos t) / (2 pi),   t = arccos(rho),
        r_ij = (sb x_ij + sa c^2) / (s_i s_j) - sa c mu (1/s_i + 1/s_j),

    with ``mu = (alpha - beta) / sqrt(2 pi)`` (so ``E_a[phi0] = mu sqrt(a)``).
    ``r_ij`` comes out of one matrix product of scaled inputs plus a rank-3
    term, and
    ``h^{-1}`` is a precomputed piecewise-cubic table in ``v = sqrt(h(1) - r)``
    (which removes the square-root behaviour at ``rho = 1``), accurate to
    about 1e-13, with Newton steps for the entries near ``rho = -1``.
    """

    name = "leaky-relu (closed form)"
    _N = 2049

    def __init__(self, act, sa, sb, c, tol, slopes):
        super().__init__(act, sa, sb, c, tol)
        self.alpha, self.beta = map(float, slopes)
        al, be = self.alpha, self.beta
        self.lin = 1.0 - sa * al * be
        self.curv = sa * (al - be) ** 2
        self.mu = (al - be) * _INV_SQRT_2PI
        if not (self.lin - 0.5 * self.curv > 0 and self.lin > 0):
            raise ValueError(
                f"The kernel recursion is not contracting for this leaky ReLU at sigma_a2={sa:g}; "
                "try a smaller sigma_a2."
            )
        self._build_table()

    def _h(self, rho):
        rho = np.clip(rho, -1.0, 1.0)
        t = np.arccos(rho)
        kap = (np.sqrt(np.maximum(1.0 - rho * rho, 0.0)) + (math.pi - t) * rho) / (2.0 * math.pi)
        return self.lin * rho - self.curv * kap, self.lin - self.curv * (math.pi - t) / (2.0 * math.pi)

    def _build_table(self):
        self.h_hi = float(self._h(np.array(1.0))[0])
        self.h_lo = float(self._h(np.array(-1.0))[0])
        self.v_max = math.sqrt(self.h_hi - self.h_lo)
        v = np.linspace(0.0, self.v_max, self._N)
        r = self.h_hi - v * v
        lo, hi = -np.ones_like(r), np.ones_like(r)
        for _ in range(64):
            mid = 0.5 * (lo + hi)
            below = self._h(mid)[0] < r
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
        rho = 0.5 * (lo + hi)
        for _ in range(3):
            hv, dh = self._h(rho)
            rho = np.clip(rho - (hv - r) / dh, -1.0, 1.0)
        rho[0], rho[-1] = 1.0, -1.0
        drho = -2.0 * v / self._h(rho)[1]  # d rho / d v
        dv = v[1] - v[0]
        y0, y1 = rho[:-1], rho[1:]
        d0, d1 = drho[:-1] * dv, drho[1:] * dv
        self._coef = np.stack([y0, d0, 3.0 * (y1 - y0) - 2.0 * d0 - d1, 2.0 * (y0 - y1) + d0 + d1]).copy()
        self._inv_dv = (self._N - 1) / self.v_max

    def _invert(self, r):
        v = np.subtract(self.h_hi, r)
        np.maximum(v, 0.0, out=v)
        np.sqrt(v, out=v)
        v *= self._inv_dv
        np.minimum(v, self._N - 1 - 1e-9, out=v)
        idx = v.astype(np.intp)
        v -= idx
        c0, c1, c2, c3 = self._coef
        rho = c3.take(idx)
        rho *= v
        rho += c2.take(idx)
        rho *= v
        rho += c1.take(idx)
        rho *= v
        rho += c0.take(idx)
        low = rho < -0.75  # (1 + rho)^{3/2} behaviour of kappa near rho = -1
        if low.any():
            rl, tl = rho[low], r[low]
            for _ in range(4):
                hv, dh = self._h(rl)
                rl = np.clip(rl - (hv - tl) / dh, -1.0, 1.0)
            rho[low] = rl
        return rho

    def diagonal(self, n_sq):
        # a = s^2 with s^2 (1 - sa (al^2 + be^2)/2) + 2 sa c mu s - sa c^2 - sb n = 0
        sa, sb, c, al, be = self.sa, self.sb, self.c, self.alpha, self.beta
        A = 1.0 - sa * (al * al + be * be) / 2.0
        B = 2.0 * sa * c * self.mu
        Cc = -(sa * c * c + sb * n_sq)
        if not A > 0:
            raise ValueError(f"The diagonal kernel fixed point diverges at sigma_a2={sa:g}; try a smaller sigma_a2.")
        s = (-B + np.sqrt(np.maximum(B * B - 4.0 * A * Cc, 0.0))) / (2.0 * A)
        return s * s

    def extra(self, X, n_sq, a):
        sa, sb, c = self.sa, self.sb, self.c
        s = np.sqrt(a)
        with np.errstate(divide="ignore"):
            q = np.where(s > 0, 1.0 / s, 0.0)
        k = sa * c * self.mu
        # r_ij = sx_i . sx_j + aux_left_i . aux_right_j (one product plus a rank-3 term)
        sx = (math.sqrt(sb) * q)[:, None] * X
        aux_left = np.column_stack([q, -k * q, np.ones_like(q)])
        aux_right = np.column_stack([sa * c * c * q, np.ones_like(q), -k * q])
        return {"sx": sx, "aux_left": aux_left, "aux_right": aux_right}

    def dot_at_diagonal(self, S):
        al, be = self.alpha, self.beta
        return np.full_like(S.a, (al * al + be * be) / 2.0)

    def gram(self, R, C):
        r = R.sx @ C.sx.T
        r += R.aux_left @ C.aux_right.T
        return r

    def chunk(self, r, R, C, kernel):
        rho = self._invert(r)
        if kernel == "ck":
            rho *= R.s[:, None]
            rho *= C.s[None, :]
            return rho
        feat = rho - r
        feat *= R.s[:, None] * (1.0 / self.sa)
        feat *= C.s[None, :]
        feat += self.c * self.c
        feat -= (self.c * self.mu) * (R.s[:, None] + C.s[None, :])
        if kernel == "feature":
            return feat
        # E[phi'(u) phi'(v)] has a square-root singularity at rho = 1:
        # identical samples (r at rounding distance from h(1)) get rho = 1
        np.copyto(rho, 1.0, where=(self.h_hi - r) < 1e-13)
        D = np.arccos(rho)
        D *= -((self.alpha - self.beta) ** 2) / (2.0 * math.pi)
        D += self.alpha * self.beta + (self.alpha - self.beta) ** 2 / 2.0
        D *= -self.sa
        D += 1.0
        feat /= D
        return feat


class _MehlerDual(_Dual):
    """Any activation: Hermite (Mehler) expansion of the dual activation.

    ``F_c(G) = sum_k h_k(i) h_k(j) rho^k`` with ``h_k(i)`` the normalised
    Hermite coefficients of ``phi0(sqrt(a_i) xi) - c`` (per-sample vectors,
    computed once by quadrature).  The truncation error after degree K is at
    most ``|rho|^(K+1) sqrt(tail_i(K) tail_j(K))`` with the exact tails from
    Parseval, so the degree follows each entry's correlation: most entries
    (small correlations) are solved together at a low degree, the others
    sorted by correlation and solved in groups, each at the degree its
    largest correlation needs.  Entries close to ``|rho| = 1`` whose bound is
    not met at degree ``MEHLER_MAX_DEGREE`` (kinked or saturating
    activations) are computed by two-dimensional quadrature in polar
    coordinates, split at the kinks.
    """

    name = "Hermite expansion"
    _MARGIN = 0.05
    _GROUP = 4096

    def __init__(self, act, sa, sb, c, tol, max_degree=MEHLER_MAX_DEGREE):
        super().__init__(act, sa, sb, c, tol)
        self.K = int(max_degree)
        self.bps = tuple(act.breakpoints)
        self.odd = bool(act.odd) and abs(c - act._value_at_zero()) <= 1e-15 * max(1.0, abs(c))

    def _f(self, x):
        return self.act(x) - self.c

    def diagonal(self, n_sq):
        sa, sb = self.sa, self.sb
        f = self._f

        def V_and_dV(a):
            s = np.sqrt(a)
            xi, w = _sample_nodes(s, self.bps)
            f2 = f(s[:, None] * xi) ** 2
            V = np.sum(w * f2, axis=1)
            with np.errstate(divide="ignore", invalid="ignore"):
                dV = np.sum(w * (xi * xi - 1.0) * f2, axis=1) / (2.0 * a)
            return V, dV

        a = sb * n_sq + sa * (self.act.variance(1.0) if n_sq.size else 0.0)
        a = np.maximum(a, np.finfo(float).tiny)
        for _ in range(200):
            V, dV = V_and_dV(a)
            g = a - sa * V - sb * n_sq
            fp = sa * V + sb * n_sq
            with np.errstate(divide="ignore", invalid="ignore"):
                new = a - g / (1.0 - sa * dV)
            bad = ~np.isfinite(new) | (new <= 0) | ~(np.abs(sa * dV) < 1)
            new = np.where(bad, fp, new)
            if not np.all(np.isfinite(new)) or np.any(new > 1e12 * np.maximum(1.0, n_sq)):
                raise ValueError("The diagonal kernel fixed point diverges; try a smaller sigma_a2.")
            done = np.all(np.abs(new - a) <= 1e-15 * new)  # relative: the same precision at every scale
            a = new
            if done:
                return a
        raise ValueError("The diagonal kernel fixed point did not converge; try a smaller sigma_a2.")

    def extra(self, X, n_sq, a):
        s = np.sqrt(a)
        n = len(a)
        K = self.K
        f, df = self._f, self.act.derivative
        xi, w = _sample_nodes(s, self.bps)
        H = np.empty((n, K + 1))
        if xi.shape[0] == 1:
            Hw = _hermite_table(xi[0], K) * w[0][:, None]
            fv = f(s[:, None] * xi)
            H[:] = fv @ Hw
            V = fv**2 @ w[0]
            d2 = df(s[:, None] * xi) ** 2 @ w[0]
        else:
            V = np.empty(n)
            d2 = np.empty(n)
            for i0 in range(0, n, 32):
                sl = slice(i0, i0 + 32)
                x, ww = xi[sl], w[sl]
                fv = f(s[sl, None] * x)
                H[sl] = np.einsum("iq,iqk->ik", fv * ww, _hermite_table(x, K))
                V[sl] = np.sum(ww * fv**2, axis=1)
                d2[sl] = np.sum(ww * df(s[sl, None] * x) ** 2, axis=1)
        csum = np.cumsum(H * H, axis=1)
        tail = np.maximum(V[:, None] - csum, 0.0)
        k = np.arange(K + 1)
        dsum = np.cumsum(k * H * H, axis=1)
        dtail = np.maximum((a * d2)[:, None] - dsum, 0.0)
        return {"H": H, "tail": tail, "dtail": dtail, "d2": d2}

    def dot_at_diagonal(self, S):
        return S.d2

    def _degrees(self, rho_abs, tail_r, tail_c, dtail_r, dtail_c, scale, ntk, tol=None):
        """Smallest degree meeting the tolerance (``self.tol`` by default) for
        each correlation bound in ``rho_abs`` (``K + 1`` where even
        ``MEHLER_MAX_DEGREE`` does not)."""
        K = np.arange(self.K + 1)
        rho_abs = np.minimum(np.atleast_1d(rho_abs), 1.0)
        with np.errstate(under="ignore", divide="ignore"):
            lr = np.log(np.maximum(rho_abs, 1e-300))[:, None]
            bound = self.sa * np.exp(lr * (K + 1)) * np.sqrt(tail_r * tail_c)
            if ntk:
                bound = np.maximum(bound, self.sa * np.exp(lr * K) * np.sqrt(dtail_r * dtail_c) * scale)
        ok = bound <= (self.tol if tol is None else tol) * scale
        return np.where(ok.any(axis=1), ok.argmax(axis=1), self.K + 1)

    def _coeffs(self, Hr, Hc, K, outer):
        """Entry-wise polynomial coefficients ``Hr_k Hc_k`` for the degrees in use."""
        ks = self._degrees_used(K)
        if outer:
            return ks, Hr[:, ks].T[:, :, None] * Hc[:, ks].T[:, None, :]
        return ks, (Hr[:, ks] * Hc[:, ks]).T

    def _degrees_used(self, K):
        # odd activations (phi0 - c odd) have vanishing even coefficients
        return np.arange(1, K + 1, 2) if self.odd else np.arange(K + 1)

    def _horner(self, rho, coef, ks):
        """Value and rho-derivative of sum_k coef_k rho^k over degrees ``ks``."""
        if self.odd:  # rho * q(rho^2)
            y = rho * rho
            q = coef[-1].copy()
            dq = np.zeros_like(q)
            for c in coef[-2::-1]:
                dq *= y
                dq += q
                q *= y
                q += c
            # p = rho q(y), dp = q(y) + 2 y q'(y)
            dq *= 2.0 * y
            dq += q
            q *= rho
            return q, dq
        p = coef[-1].copy()
        dp = np.zeros_like(p)
        for c in coef[-2::-1]:
            dp *= rho
            dp += p
            p *= rho
            p += c
        return p, dp

    _PRE_TOL = 1e-8  # truncation tolerance of the low-degree pre-solve

    def _solve(self, rho0, s, rhs, Hr, Hc, K, outer, exact_derivative=False, K_pre=None):
        """Newton on the degree-``K`` equation, started from the solution of the
        degree-``K_pre`` one (truncated to ``_PRE_TOL``): one full-degree
        Newton step then meets the tolerance, its error being about the square
        of the pre-solve's."""
        sa = self.sa
        ks, coef = self._coeffs(Hr, Hc, K, outer)

        def make(n_terms):
            cf = coef[:n_terms]

            def fun(rho):
                p, dp = self._horner(rho, cf, ks)
                g = p * -sa
                g += s * rho
                g -= rhs
                dg = dp * -sa
                dg += s
                return g, dg, p, dp

            return fun

        if K_pre is not None and K_pre < K - 2:
            n_pre = max(1, int(np.count_nonzero(ks <= K_pre)))
            rho0 = _newton(make(n_pre), rho0, tol=self._PRE_TOL, max_iter=8, strict=False)
        rho, (_, _, p, dp), step = _newton(make(len(ks)), rho0, tol=self.tol, full=True)
        if exact_derivative:  # the NTK needs E[phi' phi'] at the returned iterate
            p, dp = self._horner(rho, coef, ks)
        else:  # values at the previous iterate, moved to the returned one to first order
            p += dp * step
        return rho, p, dp

    def chunk(self, P, R, C, kernel):
        sa, sb = self.sa, self.sb
        s = R.s[:, None] * C.s[None, :]
        rhs = sb * P
        nsum = R.n_sq[:, None] + C.n_sq[None, :]
        dup = (nsum - 2.0 * P) <= 1e-13 * nsum
        zero = s <= 1e-300
        special = dup | zero
        has_special = bool(special.any())
        s_safe = np.where(zero, 1.0, s) if has_special else s
        Hr, Hc = R.H, C.H
        rho0 = rhs + sa * np.multiply.outer(Hr[:, 0], Hc[:, 0])
        rho0 /= s_safe - sa * np.multiply.outer(Hr[:, 1], Hc[:, 1])
        np.clip(rho0, -1.0, 1.0, out=rho0)
        if has_special:
            rho0[special] = 0.0
        scale = float(max(np.max(R.a, initial=0.0), np.max(C.a, initial=0.0), 1e-300))
        ntk = kernel == "ntk"
        bounds = (
            np.max(R.tail, axis=0, initial=0.0),
            np.max(C.tail, axis=0, initial=0.0),
            np.max(R.dtail, axis=0, initial=0.0),
            np.max(C.dtail, axis=0, initial=0.0),
            scale,
            ntk,
        )
        abs0 = np.abs(rho0)
        # bulk: the whole chunk at the degree of a split correlation chosen to
        # minimise (chunk size x degree + 2 x near entries x their degrees)
        cands = np.array([0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0])
        Kc = self._degrees(np.minimum(cands + self._MARGIN, 1.0), *bounds)
        k_top = int(min(self._degrees(min(1.0, float(np.max(abs0, initial=0.0)) + self._MARGIN), *bounds)[0], self.K))
        best = None
        for cand, k_c in zip(cands, Kc):
            if k_c > self.K:
                continue
            n_near = int(np.count_nonzero(abs0 > cand))
            cost = abs0.size * max(k_c, 1) + 2 * n_near * k_top
            if best is None or cost < best[0]:
                best = (cost, cand, int(k_c))
        if best is None:
            split, K_bulk = 0.0, 1
        else:
            _, split, K_bulk = best
        K_pre = int(self._degrees(min(1.0, split + self._MARGIN), *bounds, tol=self._PRE_TOL)[0])
        rho, p, dp = self._solve(rho0, s_safe, rhs, Hr, Hc, max(K_bulk, 1), True, ntk, K_pre)
        near = np.abs(rho) > split + self._MARGIN
        near |= abs0 > split
        if has_special:
            near &= ~special
        if near.any():
            ii, jj = np.nonzero(near)
            vals = self._near(rho[ii, jj], s_safe[ii, jj], rhs[ii, jj], R, C, ii, jj, ntk, bounds)
            rho[ii, jj], p[ii, jj], dp[ii, jj] = vals
        if kernel == "ck":
            out = s * rho
        elif kernel == "feature":
            out = p
        else:
            dp /= s_safe
            dp *= -sa
            dp += 1.0
            out = p / dp
        if has_special:
            if dup.any():
                di, dj = np.nonzero(dup)
                a = R.a[di]
                feat = (a - sb * R.n_sq[di]) / sa
                out[di, dj] = a if kernel == "ck" else (feat if kernel == "feature" else feat / (1.0 - sa * R.d2[di]))
            if zero.any():
                feat0 = np.multiply.outer(Hr[:, 0], Hc[:, 0])[zero]
                out[zero] = sa * feat0 + rhs[zero] if kernel == "ck" else feat0
        return out

    def _near(self, rho0, s, rhs, R, C, ii, jj, ntk, bounds):
        """Entries with large correlations: sorted groups at their own degree,
        two-dimensional quadrature where the Hermite bound is not met."""
        rho, p, dp = np.empty_like(rho0), np.empty_like(rho0), np.empty_like(rho0)
        order = np.argsort(np.abs(rho0))
        polar = []
        for g0 in range(0, len(order), self._GROUP):
            idx = order[g0 : g0 + self._GROUP]
            rmax = min(1.0, float(np.max(np.abs(rho0[idx]))) + self._MARGIN)
            K = int(self._degrees(rmax, *bounds)[0])
            K_pre = int(self._degrees(rmax, *bounds, tol=self._PRE_TOL)[0])
            K = max(1, min(K, self.K))
            Hr, Hc = R.H[ii[idx], : K + 1], C.H[jj[idx], : K + 1]
            r_, p_, dp_ = self._solve(rho0[idx], s[idx], rhs[idx], Hr, Hc, K, False, ntk, K_pre)
            # exact per-entry bound at the final correlation
            ar = np.abs(r_)
            with np.errstate(under="ignore"):
                bound = self.sa * ar ** (K + 1) * np.sqrt(R.tail[ii[idx], K] * C.tail[jj[idx], K])
                if ntk:
                    bound = np.maximum(
                        bound, self.sa * ar**K * np.sqrt(R.dtail[ii[idx], K] * C.dtail[jj[idx], K]) * s[idx]
                    )
            bad = bound > self.tol * np.maximum(bounds[4], 1e-300)
            rho[idx], p[idx], dp[idx] = r_, p_, dp_
            if bad.any():
                polar.append(idx[bad])
        if polar:
            k = np.concatenate(polar)
            rho[k], p[k], dp[k] = self._polar_solve(rho[k], s[k], rhs[k], R.s[ii[k]], C.s[jj[k]])
        return rho, p, dp

    def _polar_solve(self, rho0, s, rhs, si, sj):
        sa = self.sa
        f, df = self._f, self.act.derivative

        def fun(rho):
            p = _polar_expectation(f, f, si, sj, rho, self.bps)
            dp = _polar_expectation(df, df, si, sj, rho, self.bps) * s
            return s * rho - sa * p - rhs, s - sa * dp

        rho = _safeguarded_newton(fun, rho0, tol=self.tol)
        p = _polar_expectation(f, f, si, sj, rho, self.bps)
        dp = _polar_expectation(df, df, si, sj, rho, self.bps) * s
        return rho, p, dp


def _polar_expectation(f, g, su, sv, rho, breakpoints, n_ang=32, chunk=8):
    """``E[f(u) g(v)]`` for ``u = su xi1``, ``v = sv (rho xi1 + sqrt(1 - rho^2) xi2)``, entrywise.

    Polar coordinates ``xi = r (cos psi, sin psi)`` turn ``v`` into
    ``sv r cos(psi - theta)`` (``theta = arccos rho``).  The angular range is
    split where ``u`` or ``v`` changes sign (kinks at 0), the radial range at
    every other breakpoint, each piece by composite Gauss-Legendre.
    """
    su, sv, rho = (np.atleast_1d(np.asarray(x, dtype=float)) for x in (su, sv, rho))
    out = np.empty(len(rho))
    bps = np.array([b for b in breakpoints if b != 0.0], dtype=float)
    gx, gw = np.polynomial.legendre.leggauss(n_ang)
    r_edges = np.concatenate([[0.0, 0.05, 0.15, 0.3, 0.5, 0.75], np.arange(1.0, _XI_MAX + 0.25, 0.5)])
    for e0 in range(0, len(rho), chunk):
        sl = slice(e0, e0 + chunk)
        th = np.arccos(np.clip(rho[sl], -1.0, 1.0))
        E = len(th)
        cuts = [np.full(E, 0.5 * np.pi), np.full(E, 1.5 * np.pi), th + 0.5 * np.pi, th + 1.5 * np.pi]
        # angles where a kink of f (r = bu / (su cos psi)) crosses one of g
        # (r = bv / (sv cos(psi - theta))): the radial integral is not smooth there
        for bu in bps:
            for bv in bps:
                psi_c = np.arctan2(bv * su[sl] - bu * sv[sl] * np.cos(th), bu * sv[sl] * np.sin(th))
                cuts += [psi_c, psi_c + np.pi]
        pts = np.sort(np.mod(np.stack(cuts, 1), 2 * np.pi), axis=1)
        ends = np.concatenate([pts, pts[:, :1] + 2 * np.pi], axis=1)
        # two sub-panels per arc
        a0, a1 = ends[:, :-1], ends[:, 1:]
        am = 0.5 * (a0 + a1)
        arcs_lo = np.concatenate([a0, am], axis=1)
        arcs_hi = np.concatenate([am, a1], axis=1)
        half = 0.5 * (arcs_hi - arcs_lo)
        psi = (0.5 * (arcs_lo + arcs_hi))[..., None] + half[..., None] * gx  # (E, 8, n_ang)
        wpsi = half[..., None] * gw
        psi, wpsi = psi.reshape(E, -1), wpsi.reshape(E, -1)
        cu = su[sl, None] * np.cos(psi)  # u = r * cu
        cv = sv[sl, None] * np.cos(psi - th[:, None])
        # radial edges: base plus breakpoint crossings
        extra = []
        with np.errstate(divide="ignore", invalid="ignore"):
            for b in bps:
                for cc in (cu, cv):
                    rb = b / cc
                    extra.append(np.where((rb > 0) & (rb < _XI_MAX), rb, _XI_MAX))
        if extra:
            edges = np.sort(
                np.concatenate([np.broadcast_to(r_edges, cu.shape + (len(r_edges),)), np.stack(extra, -1)], -1), -1
            )
        else:
            edges = np.broadcast_to(r_edges, cu.shape + (len(r_edges),))
        lo, hi = edges[..., :-1], edges[..., 1:]
        hh = 0.5 * (hi - lo)
        r = (0.5 * (lo + hi))[..., None] + hh[..., None] * _GL_X  # (E, A, P, 20)
        wr = hh[..., None] * _GL_W * r * np.exp(-0.5 * r * r)
        vals = f(r * cu[..., None, None]) * g(r * cv[..., None, None])
        out[sl] = np.einsum("ea,eapq,eapq->e", wpsi, wr, vals) / (2.0 * np.pi)
    return out


def _dual_for(act: Activation, sa: float, sb: float, c: float, tol: float) -> _Dual:
    func = getattr(act, "_func", None)
    if isinstance(act, LeakyReLU):
        return _ReluDual(act, sa, sb, c, tol, (act.a, act.b))
    if func is _acts._relu:
        return _ReluDual(act, sa, sb, c, tol, (1.0, 0.0))
    if isinstance(act, Quadratic):
        return _QuadraticDual(act, sa, sb, c, tol)
    if func is special.erf:
        return _ErfDual(act, sa, sb, c, tol)
    if func is _acts._gelu:
        return _GeluDual(act, sa, sb, c, tol)
    return _MehlerDual(act, sa, sb, c, tol)


# ---------------------------------------------------------------------------
# the engine


class ImplicitKernelEngine:
    """Exact infinite-width implicit kernels between data sets, block by block.

    The engine fixes everything that does not depend on the data being
    transformed: the activation, ``sigma_a2``, ``sigma_b2``, the training
    scale ``tau0`` (hence the centring constant ``c = E_tau[phi0]``) and the
    kernel.  :meth:`prepare` computes per-sample quantities once (the diagonal
    fixed points, and for generic activations the Hermite coefficients);
    :meth:`kernel` assembles a kernel matrix block by block.

    Parameters
    ----------
    activation : str, Activation or callable
    sigma_a2 : float
    tau0 : float
        Training data scale.
    kernel : {'ck', 'feature', 'ntk'}, default='ck'
    sigma_b2 : float, optional
    tol : float, default=1e-12
        Tolerance of every entry's correlation fixed point.
    """

    def __init__(self, activation, sigma_a2, tau0, *, kernel="ck", sigma_b2=None, tol=1e-12):
        check_kernel(kernel)
        self.activation = get_activation(activation)
        self.coefficients = deq_ck_coefficients(self.activation, sigma_a2, tau0, sigma_b2=sigma_b2)
        co = self.coefficients
        self.kernel_name = kernel
        self.tol = float(tol)
        self.dual = _dual_for(self.activation, co.sigma_a2, co.sigma_b2, co.moments.mean, self.tol)

    @property
    def method(self) -> str:
        """How the dual activation is evaluated (closed form or Hermite expansion)."""
        return self.dual.name

    def prepare(self, X) -> _Samples:
        return self.dual.prepare(np.asarray(X, dtype=np.float64))

    def diagonal(self, S: _Samples) -> np.ndarray:
        return self.dual.diagonal_values(S, self.kernel_name)

    def kernel(self, SX: _Samples, SY: _Samples | None = None, *, block_size=None, n_jobs=None, out=None) -> np.ndarray:
        symmetric = SY is None
        SY = SX if symmetric else SY
        n, m = len(SX), len(SY)
        if out is None:
            check_kernel_fits_in_memory(n, m)
            out = np.empty((n, m))
        if n == 0 or m == 0:
            return out
        # n_jobs=None: 1 unless a joblib.parallel_config context says otherwise
        workers = effective_n_jobs(n_jobs)
        b = int(block_size) if block_size is not None else _auto_block_size(workers)
        rows = [slice(i, min(i + b, n)) for i in range(0, n, b)]
        cols = rows if symmetric else [slice(j, min(j + b, m)) for j in range(0, m, b)]
        pairs = [(bi, bj) for bi in rows for bj in cols if not symmetric or bj.start >= bi.start]
        kern = self.kernel_name
        dual = self.dual
        if workers == 1:
            results = (_block_task(dual, kern, bi, bj, SX.take(bi), SY.take(bj)) for bi, bj in pairs)
            limits = contextlib.nullcontext()
        else:
            results = Parallel(n_jobs=n_jobs, prefer="threads", return_as="generator_unordered")(
                delayed(_block_task)(dual, kern, bi, bj, SX.take(bi), SY.take(bj)) for bi, bj in pairs
            )
            # one BLAS thread per worker: the blocks are the parallelism (with
            # multithreaded BLAS inside every thread the cores are oversubscribed)
            limits = threadpool_limits(limits=1, user_api="blas")
        with limits:
            self._collect(results, out, symmetric)
        if symmetric:
            out[np.diag_indices(n)] = self.diagonal(SX)
        return out

    @staticmethod
    def _collect(results, out, symmetric):
        for bi, bj, blk in results:
            if symmetric and bj.start == bi.start:
                # mirror the upper triangle so that the result is exactly symmetric
                il = np.tril_indices(blk.shape[0], -1)
                blk[il] = blk.T[il]
            out[bi, bj] = blk
            if symmetric and bj.start != bi.start:
                out[bj, bi] = blk.T


def _block_task(dual, kernel, bi, bj, R, C):
    with np.errstate(all="ignore"):
        return bi, bj, dual.block(R, C, kernel)


def implicit_kernel(
    X,
    Y=None,
    *,
    activation="relu",
    sigma_a2: float = 0.2,
    kernel: str = "ck",
    tau0: float | None = None,
    sigma_b2: float | None = None,
    block_size: int | None = None,
    n_jobs: int | None = None,
    tol: float = 1e-12,
) -> np.ndarray:
    """Exact infinite-width Implicit-CK, feature kernel or Implicit-NTK of a DEQ.

    Every entry is the fixed point of SPEC §3 (diagonal entries first, each a
    scalar fixed point in ``||x_i||^2``; then every off-diagonal entry as a
    scalar equation in its correlation), solved to ``tol``.  Closed forms
    give the dual activation for ReLU and leaky ReLU (arc-cosine), erf
    (arcsine), GELU and quadratic activations; any other activation uses a
    Hermite expansion with per-sample coefficient vectors (degree chosen per
    block from an exact truncation bound) and polar quadrature for the few
    entries it cannot resolve.

    Parameters
    ----------
    X : array of shape (n_samples_X, n_features)
    Y : array of shape (n_samples_Y, n_features), optional
        Second data set; ``K(X, X)`` (symmetric, computed once per pair) when
        omitted.
    activation : str, Activation or callable, default='relu'
    sigma_a2 : float, default=0.2
    kernel : {'ck', 'feature', 'ntk'}, default='ck'
        ``'ck'``: the Implicit-CK ``G*`` with the ``sigma_b2 x^T y`` input
        injection (the paper's kernel); ``'feature'``: ``Sigma* = (G* -
        sigma_b2 x^T y) / sigma_a2``, the Gram matrix of the DEQ features its
        readout sees; ``'ntk'``: the Implicit-NTK ``Sigma* / (1 - sigma_a2
        Sigma-dot*)`` (SPEC §5).
    tau0 : float, optional
        Data scale fixing the centring constant; measured from ``X`` by
        default.
    sigma_b2 : float, optional
        ``1 - sigma_a2`` by default.
    block_size : int, optional
        Rows and columns per block; by default chosen from scikit-learn's
        ``working_memory``.
    n_jobs : int, optional
        Blocks computed in parallel through joblib (threads by default; the
        active joblib backend, e.g. ``dask``, when one is configured).
    tol : float, default=1e-12
        Tolerance of each entry's fixed point.

    Returns
    -------
    ndarray of shape (n_samples_X, n_samples_Y)

    Examples
    --------
    >>> import numpy as np
    >>> from sk_deq.kernels import implicit_kernel
    >>> X = np.random.default_rng(0).standard_normal((5, 3)) / np.sqrt(3)
    >>> K = implicit_kernel(X, activation="relu", sigma_a2=0.2)
    >>> K.shape, bool(np.allclose(K, K.T))
    ((5, 5), True)
    """
    X = check_samples(X)
    t0 = data_tau0(X) if tau0 is None else check_tau0(tau0)
    eng = ImplicitKernelEngine(activation, sigma_a2, t0, kernel=kernel, sigma_b2=sigma_b2, tol=tol)
    SX = eng.prepare(X)
    if Y is None:
        return eng.kernel(SX, block_size=block_size, n_jobs=n_jobs)
    Y = check_samples(Y, "Y", n_features=X.shape[1])
    return eng.kernel(SX, eng.prepare(Y), block_size=block_size, n_jobs=n_jobs)


def implicit_kernel_diagonal(
    X, *, activation="relu", sigma_a2=0.2, kernel="ck", tau0=None, sigma_b2=None
) -> np.ndarray:
    """Diagonal ``K(x_i, x_i)`` of :func:`implicit_kernel` in O(n) time."""
    X = check_samples(X)
    t0 = data_tau0(X) if tau0 is None else check_tau0(tau0)
    eng = ImplicitKernelEngine(activation, sigma_a2, t0, kernel=kernel, sigma_b2=sigma_b2)
    return eng.diagonal(eng.prepare(X))


# ---------------------------------------------------------------------------
# label-free high-dimensional equivalent (SPEC §3 on arbitrary data)


def _duplicate_mask(P, n_row, n_col):
    nsum = n_row[:, None] + n_col[None, :]
    return (nsum - 2.0 * P) <= 1e-13 * nsum


def linearized_kernel_coefficients(activation, sigma_a2, tau0, *, kernel="ck", sigma_b2=None):
    """The ``KernelCoefficients`` (linear, norm, inner, diagonal) behind
    :func:`linearized_implicit_kernel`."""
    check_kernel(kernel)
    if kernel == "ntk":
        return deq_ntk_coefficients(activation, sigma_a2, tau0, sigma_b2=sigma_b2).kernel()
    co = deq_ck_coefficients(activation, sigma_a2, tau0, sigma_b2=sigma_b2)
    return co.implicit_kernel() if kernel == "ck" else co.feature_kernel()


def linearized_implicit_kernel(
    X,
    Y=None,
    *,
    activation="relu",
    sigma_a2: float = 0.2,
    kernel: str = "ck",
    tau0: float | None = None,
    sigma_b2: float | None = None,
) -> np.ndarray:
    """Label-free high-dimensional equivalent of the implicit kernels (SPEC §3, §5).

    SPEC §3 writes the equivalent on Gaussian-mixture data with class labels.
    Its terms have label-free counterparts on any data: ``t_a / sqrt(p) +
    psi_i ~= ||x_i||^2 - tau0^2 =: delta_i``, and ``T_ab / p`` is the mean of
    ``(x_i^T x_j)^2`` over pairs of classes ``a, b`` (with the uncentred
    ``T_ab = tr(C_a C_b) / p``, see :func:`sk_deq.theory.gmm_statistics`).
    So, for distinct samples::

        K_ij = linear x_i^T x_j + norm delta_i delta_j + inner (x_i^T x_j)^2

    and on the diagonal (and between identical samples)
    ``K_ii = linear ||x_i||^2 + norm delta_i^2 + max(identity, inner ||x_i||^4)``,
    with the coefficients ``(tau, alpha1, alpha2, alpha3)`` (CK), their
    feature-kernel versions, or ``(kappa, beta1, beta2, beta3)`` (NTK) at the
    training scale ``tau0``.  The floor ``inner ||x_i||^4`` keeps every Gram
    matrix positive semi-definite (the other terms are PSD with non-negative
    coefficients); it only acts on samples whose squared norm is well above
    ``tau0^2`` (e.g. ``||x||^2 > 1.09 tau0^2`` for the ReLU CK), where the
    expansion is not accurate anyway.  Without it, 1,000 MNIST digits gave
    the ReLU feature kernel an eigenvalue of -0.12; with it the spectral
    error to the exact kernel moves from 0.0365 to 0.0378 (CK: 0.0019 to
    0.0020; NTK unchanged at 0.041).

    It is a second-order expansion in the inner products and norm
    fluctuations, accurate when samples are nearly orthogonal and of nearly
    equal norm (high dimension).  Measured relative spectral errors against
    :func:`implicit_kernel`: on the paper's Gaussian mixture (n = 1.25 p)
    the ReLU feature kernel is matched to 0.023 / 0.0077 / 0.0025 at p = 100 /
    400 / 1600 (the label-based SPEC equivalent: 0.106 / 0.040 / 0.014) and
    the CK to 0.0013 / 0.0004 / 0.0001.  Odd activations (tanh) have
    ``alpha2 = alpha3 = 0``, so only the linear part remains: feature kernel
    0.15 / 0.098 / 0.055 (CK 0.009 / 0.007 / 0.004), the remainder being the
    norm dependence of the linear coefficient, which vanishes like
    ``p^(-1/2)``.  On 1,000 real MNIST digits (global input scaling) the
    errors are 0.053 (ReLU feature), 0.003 (ReLU CK), 0.147 (tanh feature)
    and 0.011 (tanh CK).

    Parameters are those of :func:`implicit_kernel`.

    Returns
    -------
    ndarray of shape (n_samples_X, n_samples_Y)
    """
    X = check_samples(X)
    t0 = data_tau0(X) if tau0 is None else check_tau0(tau0)
    co = linearized_kernel_coefficients(activation, sigma_a2, t0, kernel=kernel, sigma_b2=sigma_b2)
    Yv = X if Y is None else check_samples(Y, "Y", n_features=X.shape[1])
    check_kernel_fits_in_memory(len(X), len(Yv))
    nx = squared_norms(X)
    ny = nx if Y is None else squared_norms(Yv, "Y")
    return _linearized_block(co, t0, X, Yv, nx, ny)


def _linearized_block(co, t0, X, Y, nx, ny):
    P = X @ Y.T
    dx, dy = nx - t0 * t0, ny - t0 * t0
    K = P * co.inner
    K += co.linear
    K *= P
    K += co.norm * np.multiply.outer(dx, dy)
    dup = _duplicate_mask(P, nx, ny)
    if dup.any():
        di, dj = np.nonzero(dup)
        # identity + inner ||x||^4 at least: K is then linear P + norm dd^T + inner P*P plus a
        # non-negative diagonal, PSD (all coefficients are >= 0).  Without the floor, samples with
        # ||x||^4 > identity / inner (a third of MNIST for ReLU) made the matrix indefinite.
        K[di, dj] = co.linear * nx[di] + co.norm * dx[di] ** 2 + np.maximum(co.identity, co.inner * nx[di] ** 2)
    return K


# ---------------------------------------------------------------------------
# exact kernels of explicit networks (closed-form layers)


_HT_NODES, _HT_WEIGHTS = np.polynomial.legendre.leggauss(8)


def _hard_tanh_pair(gain: float, c: float, G, ai, aj):
    """``E[s(u) s(v)]`` and ``E[s'(u) s'(v)]`` for ``s = gain * clip(., -c, c)``, entrywise.

    Conditionally on ``u``, ``v`` is Gaussian and ``E[clip(v) | u]``,
    ``P(|v| < c | u)`` have closed forms; the remaining integral over ``u`` is
    composite Gauss-Legendre with panel edges at the kinks ``u = +-c`` (8 nodes
    per panel half the smallest standard deviation wide).  Accurate to
    about 1e-10 for correlations up to 0.99 and exact on the diagonal; the
    inner conditional kink sharpens as the correlation tends to 1, where the
    error grows (about 1e-6 at 0.9999).
    """
    G, ai, aj = np.broadcast_arrays(np.asarray(G, float), np.asarray(ai, float), np.asarray(aj, float))
    shape = G.shape
    G, ai, aj = G.ravel(), ai.ravel(), aj.ravel()
    F = np.empty_like(G)
    D = np.empty_like(G)
    g2 = gain * gain
    # u == 0 (a zero-norm sample): s(u) = 0 and s'(u) = gain, so F = 0, D = gain^2 P(|v| < c).
    zero = ai <= 0
    if zero.any():
        F[zero] = 0.0
        with np.errstate(divide="ignore"):
            D[zero] = g2 * np.where(aj[zero] > 0, special.erf(c / np.sqrt(2.0 * np.maximum(aj[zero], 0.0))), 1.0)
    # |rho| = 1 (collinear samples): v = beta u exactly, and the kinks of clip(beta u) would fall
    # inside the panels; closed form instead.
    with np.errstate(divide="ignore", invalid="ignore"):
        collinear = ~zero & (aj > 0) & (G * G >= ai * aj * (1.0 - 1e-12))
    if collinear.any():
        F[collinear], D[collinear] = _hard_tanh_collinear(g2, c, ai[collinear], G[collinear] / ai[collinear])
    # The panels are as wide as half the smallest standard deviation of a chunk: chunks of entries
    # sorted by it, whose standard deviations differ by at most a factor 2, keep their number bounded.
    order = np.flatnonzero(~zero & ~collinear)
    order = order[np.argsort(ai[order], kind="stable")]
    s0 = 0
    while s0 < order.size:
        s1 = min(s0 + 2048, order.size)
        s1 = s0 + int(np.searchsorted(ai[order[s0:s1]], 4.0 * ai[order[s0]], side="right"))
        idx = order[s0:s1]
        s0 = s1
        g, a, b = G[idx], ai[idx], aj[idx]
        smax, smin = math.sqrt(float(a.max())), math.sqrt(float(a.min()))
        L = 9.0 * smax
        h = 0.5 * smin
        edges = np.arange(-L, L + h, h)
        edges = np.unique(np.concatenate([np.clip(edges, -L, L), [-c, c] if c < L else []]))
        lo, hi = edges[:-1], edges[1:]
        half = 0.5 * (hi - lo)
        u = (0.5 * (hi + lo)[:, None] + half[:, None] * _HT_NODES[None, :]).ravel()
        wu = (half[:, None] * _HT_WEIGHTS[None, :]).ravel()
        dens = np.exp(-0.5 * u[None, :] ** 2 / a[:, None]) / np.sqrt(2.0 * math.pi * a[:, None])
        beta = (g / a)[:, None]
        sd = np.sqrt(np.maximum(b - g * g / a, 0.0))[:, None]
        mu = beta * u[None, :]
        with np.errstate(divide="ignore", invalid="ignore"):
            lo_z = np.where(sd > 0, (-c - mu) / sd, np.where(mu > -c, -np.inf, np.inf))
            hi_z = np.where(sd > 0, (c - mu) / sd, np.where(mu < c, np.inf, -np.inf))
        P_lo, P_hi = special.ndtr(lo_z), special.ndtr(hi_z)
        pdf = lambda z: np.exp(-0.5 * np.where(np.isfinite(z), z, 0.0) ** 2) * np.isfinite(z) * _INV_SQRT_2PI
        mean_clip = -c * P_lo + c * (1.0 - P_hi) + mu * (P_hi - P_lo) + sd * (pdf(lo_z) - pdf(hi_z))
        wd = wu[None, :] * dens
        F[idx] = g2 * np.sum(wd * np.clip(u, -c, c)[None, :] * mean_clip, axis=1)
        D[idx] = g2 * np.sum(wd * (np.abs(u) < c)[None, :] * (P_hi - P_lo), axis=1)
    return F.reshape(shape), D.reshape(shape)


def _hard_tanh_collinear(g2: float, c: float, a, beta):
    """``g2 E[clip(u) clip(beta u)]`` and ``g2 P(|u| < c, |beta u| < c)`` for ``u ~ N(0, a)`` (clip at ``c``).

    Piecewise in ``|u|``: both linear below ``k = min(c, c/|beta|)``, one
    saturated up to ``K = max(c, c/|beta|)``, both saturated beyond; each
    piece a truncated Gaussian moment.
    """
    s = np.sqrt(a)
    b = np.abs(beta)
    sign = np.sign(beta)
    with np.errstate(divide="ignore"):
        k = np.minimum(c, c / b)
        K = np.maximum(c, c / b)
    zk, zK = k / s, K / s
    pk, pK = np.exp(-0.5 * zk * zk) * _INV_SQRT_2PI, np.exp(-0.5 * zK * zK) * _INV_SQRT_2PI
    inner = a * (special.ndtr(zk) - 0.5 - zk * pk)  # int_0^k u^2 phi_a(u) du
    middle = s * (pk - pK)  # int_k^K u phi_a(u) du
    outer = special.ndtr(-zK)  # int_K^inf phi_a(u) du
    slope = np.minimum(b, 1.0)  # the unsaturated factor's slope in the middle piece
    F = 2.0 * g2 * (beta * inner + sign * c * slope * middle + sign * c * c * outer)
    D = g2 * special.erf(k / (np.sqrt(2.0) * s))
    return F, D


def _layer_dual(act: Activation, c: float):
    """``(mean(a), pair(G, ai, aj) -> (F_c, D))`` of one centred layer."""
    if isinstance(act, HardTanh):
        gain, thr = act.a, act.c

        def pair(G, ai, aj):
            return _hard_tanh_pair(gain, thr, G, ai, aj)  # odd: already centred

        return (lambda a: np.zeros_like(np.asarray(a, float))), pair
    func = getattr(act, "_func", None)
    if isinstance(act, LeakyReLU) or func is _acts._relu:
        al, be = (act.a, act.b) if isinstance(act, LeakyReLU) else (1.0, 0.0)
        mu = (al - be) * _INV_SQRT_2PI

        def mean(a):
            return mu * np.sqrt(a)

        def pair(G, ai, aj):
            s = np.sqrt(ai * aj)
            with np.errstate(divide="ignore", invalid="ignore"):
                rho = np.clip(np.where(s > 0, G / s, 0.0), -1.0, 1.0)
            # identical inputs: rho = 1 up to rounding, where the derivative
            # dual has a square-root singularity
            rho = np.where(rho > 1.0 - 1e-13, 1.0, rho)
            t = np.arccos(rho)
            kap = (np.sqrt(np.maximum(1.0 - rho * rho, 0.0)) + (math.pi - t) * rho) / (2.0 * math.pi)
            F = s * (al * be * rho + (al - be) ** 2 * kap) - c * mu * (np.sqrt(ai) + np.sqrt(aj)) + c * c
            D = al * be + (al - be) ** 2 * (math.pi - t) / (2.0 * math.pi)
            return F, D

        return mean, pair
    dual = {special.erf: _ErfDual, _acts._gelu: _GeluDual}.get(func)
    if dual is None and isinstance(act, Quadratic):
        dual = _QuadraticDual
    if dual is None:
        raise NotImplementedError(
            f"explicit_kernel has closed forms for ReLU, leaky-ReLU, erf, GELU and quadratic layers and a "
            f"quadrature for hard-tanh layers, not for {act.name!r}."
        )
    d = dual(act, 0.5, 0.5, c, 1e-12)

    def pair(G, ai, aj):
        F, D = d.pair(G, d.pre(ai, aj))
        return F - c * (d.mean(ai) + d.mean(aj)) + c * c, D

    return d.mean, pair


def explicit_kernel(
    X, Y=None, *, layers, kernel: str = "ck", tau0: float | None = None, block_size: int | None = None
) -> np.ndarray:
    """Exact infinite-width CK (NNGP) or NTK of an explicit network (SPEC §4, §5).

    ``y_0 = x``, ``y_l = (sigma_l(W_l y_{l-1}) - c_l) / sqrt(m)`` with ``c_l``
    centring layer ``l`` at its input scale ``tau_{l-1}`` for the data scale
    ``tau0`` (the conventions of :func:`sk_deq.theory.explicit_kernel_entry`,
    NTK with respect to the readout and ``W_2 .. W_L``).  Each layer is one
    closed-form dual evaluation per entry, so the cost is one matrix product
    plus ``L`` elementwise passes.

    Parameters
    ----------
    X : array of shape (n_samples_X, n_features)
    Y : array of shape (n_samples_Y, n_features), optional
    layers : sequence of str or Activation
        ReLU, leaky-ReLU, hard-tanh, erf, GELU or quadratic layers, first
        layer first (e.g. ``sk_deq.match_explicit(...).layers``).
    kernel : {'ck', 'ntk'}, default='ck'
    tau0 : float, optional
        Data scale fixing the centring; measured from ``X`` by default.
    block_size : int, optional
        Rows per block (memory bound), from ``working_memory`` by default.

    Returns
    -------
    ndarray of shape (n_samples_X, n_samples_Y)
    """
    check_kernel(kernel, EXPLICIT_KERNELS)
    X = check_samples(X)
    t0 = data_tau0(X) if tau0 is None else check_tau0(tau0)
    coefs = explicit_coefficients(layers, t0)
    duals = [_layer_dual(act, c) for act, c in zip(coefs.layers, coefs.centers)]
    Yv = X if Y is None else check_samples(Y, "Y", n_features=X.shape[1])
    check_kernel_fits_in_memory(len(X), len(Yv))

    def diagonals(Z):
        a = squared_norms(Z)
        out = [a]
        for _mean, pair in duals:
            F, _ = pair(a, a, a)
            a = np.maximum(F, 0.0)
            out.append(a)
        return out

    dx = diagonals(X)
    dy = dx if Y is None else diagonals(Yv)
    out = np.empty((len(X), len(Yv)))
    b = int(block_size) if block_size is not None else max(1, _CHUNK_ENTRIES * 8 // max(1, len(Yv)))
    with np.errstate(invalid="ignore", divide="ignore"):
        for i0 in range(0, len(X), b):
            sl = slice(i0, i0 + b)
            S = X[sl] @ Yv.T
            theta = np.zeros_like(S)
            for layer, (_mean, pair) in enumerate(duals):
                F, D = pair(S, dx[layer][sl, None], dy[layer][None, :])
                if kernel == "ntk":
                    theta = F + theta * D
                S = F
            out[sl] = S if kernel == "ck" else theta
    if Y is None:  # exactly symmetric: K[i, j] and K[j, i] integrate with the roles of u and v swapped
        out = 0.5 * (out + out.T)
    return out
