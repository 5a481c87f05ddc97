"""The exact infinite-width implicit kernels of a DEQ.

The recursions are those of :ref:`theory-exact` and :ref:`theory-ntk`.

:class:`ImplicitKernelEngine` fixes the activation, ``sigma_a2``,
``sigma_b2``, the training scale and the kernel; it prepares per-sample
quantities once and assembles kernel matrices block by block (on all cores
by default: threads, :func:`kernel_workers` and
:func:`~sk_deq.kernels._workers.map_unordered`), each block
solved by the activation's dual solver (:mod:`sk_deq.kernels._duals`,
:mod:`sk_deq.kernels._mehler`).  :func:`implicit_kernel` and
:func:`implicit_kernel_diagonal` are its plain-function forms.
"""

from __future__ import annotations

import contextlib
import copy

import numpy as np

from .._runtime import full_float32_precision, resolve_device
from .._validation import check_bias_variance, check_kernel, check_samples, check_tau0
from .._scaling import data_tau0
from .._runtime import one_blas_thread
from ..activations import Activation, get_activation
from ..theory import deq_ck_coefficients
from ._duals import Samples, _ClosedFormDual, _Dual, _ReluDual
from ._mehler import MehlerDual
from ._workers import kernel_workers, map_unordered, shares_memory
from .._runtime import auto_block_size, check_kernel_fits_in_memory

__all__ = ["ImplicitKernelEngine", "dual_for", "implicit_kernel", "implicit_kernel_diagonal", "kernel_workers"]


def dual_for(act: Activation, sa: float, sb: float, c: float, tol: float) -> _Dual:
    """The solver of ``act``, chosen by its :class:`~sk_deq.activations.DualFormula` (``act.dual``).

    The table inversion for piecewise-linear formulas (``slopes``), the
    formula's closed forms for the others the engine may use
    (``implicit``), and the Hermite expansion where there is no formula.
    """
    formula = act.dual
    if formula is None or not formula.implicit:
        return MehlerDual(act, sa, sb, c, tol)
    if formula.slopes is not None:
        return _ReluDual(act, sa, sb, c, tol, formula)
    return _ClosedFormDual(act, sa, sb, c, tol, formula)


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
        DEQ activation ``phi0``; its :class:`~sk_deq.activations.DualFormula`
        (if any) chooses the solver, see :attr:`method`.
    sigma_a2 : float
        Recurrent weight variance in ``(0, 1)``.
    tau0 : float
        Training data scale, fixing the centring constant.
    kernel : {'ck', 'feature', 'ntk'}, default='ck'
        Which kernel (see :func:`implicit_kernel`).
    sigma_b2 : float, optional
        Input weight variance, ``1 - sigma_a2`` by default.
    tol : float, default=1e-12
        Tolerance of every entry's correlation fixed point.
    bias_variance : float, default=0.0
        A constant added to every entry of :meth:`kernel` and
        :meth:`diagonal`: the variance of a readout bias (see
        :ref:`kernel-bias`).  0 gives the implicit kernel itself.
    device : None, str or torch.device, optional
        Where :meth:`kernel` solves the blocks (:func:`sk_deq.resolve_device`,
        the rule of every ``device`` of sk_deq): None (the default) for the
        numpy engine on the CPU (torch is not imported); ``'auto'`` for the
        current CUDA device when available, else the numpy engine;
        ``'cpu'``, ``'cuda'``, ``'cuda:N'`` or a :class:`torch.device` for
        torch in float64 on that device
        (:mod:`sk_deq.kernels.torch_engine`).  :meth:`prepare` stays in
        numpy either way.

    Attributes
    ----------
    activation : Activation
        The resolved activation.
    coefficients : DEQCoefficients
        ``tau``, ``alpha1 .. alpha4`` and the centring constant
        (``coefficients.moments.mean``) at ``tau0``.
    device : torch.device or None
        The resolved device, None for the numpy engine.

    Raises
    ------
    ValueError
        For a ``device`` :func:`sk_deq.resolve_device` refuses: not a CPU or
        CUDA device, or a CUDA device this machine does not have.

    Examples
    --------
    >>> import numpy as np
    >>> from sk_deq.kernels import ImplicitKernelEngine
    >>> rng = np.random.default_rng(0)
    >>> X_train = rng.standard_normal((30, 10)) / np.sqrt(10)
    >>> X_new = rng.standard_normal((4, 10)) / np.sqrt(10)
    >>> eng = ImplicitKernelEngine("relu", 0.2, tau0=1.0, kernel="feature")
    >>> eng.method
    'leaky-relu (closed form)'
    >>> S_train = eng.prepare(X_train)
    >>> eng.kernel(eng.prepare(X_new), S_train).shape
    (4, 30)
    >>> K = eng.kernel(S_train)
    >>> bool(np.allclose(np.diag(K), eng.diagonal(S_train)))
    True
    """

    def __init__(
        self, activation, sigma_a2, tau0, *, kernel="ck", sigma_b2=None, tol=1e-12, bias_variance=0.0, device=None
    ):
        check_kernel(kernel)
        self.bias_variance = check_bias_variance(bias_variance)
        self.activation = get_activation(activation)
        self.coefficients = deq_ck_coefficients(self.activation, sigma_a2, tau0, sigma_b2=sigma_b2)
        co = self.coefficients
        self.kernel_name = kernel
        self.tol = float(tol)
        self.dual = dual_for(self.activation, co.sigma_a2, co.sigma_b2, co.moments.mean, self.tol)
        self.device = resolve_device(device)
        self._solver = None

    def with_device(self, device) -> ImplicitKernelEngine:
        """The same engine computing its blocks on ``device`` (None: the numpy engine).

        Returns ``self`` when the device is the same, else a shallow copy:
        the prepared samples of either engine serve both.

        Parameters
        ----------
        device : None, str or torch.device
            As the constructor's ``device``.

        Returns
        -------
        ImplicitKernelEngine
            An engine on ``device``.

        Raises
        ------
        ValueError
            For a ``device`` :func:`sk_deq.resolve_device` refuses.
        """
        dev = resolve_device(device)
        if dev == self.device:
            return self
        other = copy.copy(self)
        other.device, other._solver = dev, None
        return other

    def _torch_solver(self):
        if self._solver is None:
            from .torch_engine import TorchKernelSolver

            co = self.coefficients
            self._solver = TorchKernelSolver(
                self.activation, co.sigma_a2, co.sigma_b2, co.moments.mean, self.tol, self.device
            )
        return self._solver

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_solver"] = None  # tensors on the device: rebuilt where the engine is used
        return state

    @property
    def method(self) -> str:
        """How the dual activation is evaluated (closed form or Hermite expansion)."""
        return self.dual.name

    def prepare(self, X) -> Samples:
        """Per-sample quantities of the rows of ``X``, computed once.

        The diagonal fixed point of every sample (a function of its squared
        norm) and, for activations without closed forms, its Hermite
        coefficients.  The rows are used as given: validate and scale them
        first (as :func:`implicit_kernel` and the transformer do).  Its
        products run on one BLAS thread.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Finite samples, one per row.

        Returns
        -------
        Samples
            What :meth:`kernel` and :meth:`diagonal` take, sliceable by
            rows; ``len`` is ``n_samples``.  With a ``device`` they also
            hold the Hermite coefficients of activations the numpy engine
            evaluates in closed form (erf, GELU): the torch engine solves
            those by their Hermite expansion.
        """
        # One BLAS thread: the per-sample products are small, and a multithreaded BLAS call leaves its
        # threads spinning for a while after it returns, on the cores the kernel's workers start on next
        with one_blas_thread():
            S = self.dual.prepare(np.asarray(X, dtype=np.float64))
        if self.kernel_name == "ntk":
            self._check_ntk_contraction(S)
        if self.device is not None:
            S = self._torch_solver().with_hermite(S)
        return S

    def _check_ntk_contraction(self, S: Samples) -> None:
        """The Implicit-NTK's ``(1 - sigma_a2 E[phi'(u) phi'(v)])^{-1}`` needs the DEQ to contract at every sample.

        By Cauchy-Schwarz the off-diagonal factors are positive once the
        diagonal ones ``1 - sigma_a2 E[phi'(u)^2]`` are; where one is not, the
        DEQ's Jacobian is not contracting at that input and the NTK (negative
        or infinite) does not exist.
        """
        if not len(S):
            return
        q = self.dual.sa * self.dual.dot_at_diagonal(S)
        k = int(np.argmax(q))
        if not q[k] < 1.0:
            raise ValueError(
                f"The Implicit-NTK does not exist at sigma_a2={self.dual.sa:g} for activation "
                f"{self.activation.name!r}: the DEQ is not contracting at a sample with ||x||^2 = {S.n_sq[k]:.4g} "
                f"(sigma_a2 * E[phi'(u)^2] = {q[k]:.4g} >= 1 at its pre-activation variance {S.a[k]:.4g}). "
                "Use a smaller sigma_a2, or rescale the inputs."
            )

    def diagonal(self, S: Samples) -> np.ndarray:
        """The diagonal ``K(x_i, x_i)`` in O(n) time.

        Parameters
        ----------
        S : Samples
            Prepared samples, from :meth:`prepare`.

        Returns
        -------
        ndarray of shape (n_samples,)
            The kernel of every sample with itself.
        """
        return self.dual.diagonal_values(S, self.kernel_name) + self.bias_variance

    def kernel(self, SX: Samples, SY: Samples | None = None, *, block_size=None, n_jobs=None, out=None) -> np.ndarray:
        """The kernel matrix ``K(X, Y)``, block by block.

        Parameters
        ----------
        SX : Samples
            Prepared rows, from :meth:`prepare`.
        SY : Samples, optional
            Prepared columns; ``K(X, X)`` when omitted (symmetric: every pair
            of blocks is solved once and the result is exactly symmetric).
        block_size : int, optional
            Rows and columns per block; by default chosen from
            scikit-learn's ``working_memory`` and the number of workers.
        n_jobs : int, optional
            Blocks computed in parallel on threads, one BLAS thread each,
            or through joblib when a ``joblib.parallel_config`` backend such
            as ``dask`` is active.  ``None`` means all cores outside a joblib
            context or worker (:func:`kernel_workers`); ``1`` is serial.
            Every block is solved as in serial, its inner products on one
            BLAS thread whatever ``n_jobs`` (in serial too, when there is more
            than one block): with the same ``block_size`` the result of
            threads is bitwise that of ``n_jobs=1``.  The workers of a
            process backend keep their own BLAS threads: their result
            agrees to rounding (tested to 1e-12 of the largest entry).
            Ignored with a ``device``: the
            blocks are then computed one after another on it (with torch's
            own threads on a CPU).
        out : ndarray of shape (n_samples_X, n_samples_Y), optional
            Array to write the kernel into (no memory check is made then).

        Returns
        -------
        ndarray of shape (n_samples_X, n_samples_Y)
            The kernel matrix (``out`` when given).

        Raises
        ------
        MemoryError
            If no ``out`` is given and the matrix does not fit in the
            available memory.
        """
        symmetric = SY is None
        SY = SX if SY is None else SY
        n, m = len(SX), len(SY)
        if out is None:
            check_kernel_fits_in_memory(n, m)
            out = np.empty((n, m))
        if n == 0 or m == 0:
            return out
        if self.device is not None:
            self._torch_kernel(SX, None if symmetric else SY, block_size, out)
        else:
            self._numpy_kernel(SX, None if symmetric else SY, block_size, n_jobs, out)
        if symmetric:  # the blocks' writers added the bias to every other entry (in parallel, cache-warm)
            out[np.diag_indices(n)] = self.dual.diagonal_values(SX, self.kernel_name) + self.bias_variance
        return out

    def _numpy_kernel(self, SX, SY, block_size, n_jobs, out):
        symmetric = SY is None
        SY = SX if SY is None else SY
        n, m = len(SX), len(SY)
        workers = kernel_workers(n_jobs)
        pairs = _block_pairs(n, m, int(block_size) if block_size is not None else auto_block_size(workers), symmetric)
        # diagonal blocks first: they hold the correlations near 1, the costliest
        # entries, so the threads finish on cheaper blocks and together
        pairs.sort(key=lambda p: p[0] != p[1])
        kern, dual = self.kernel_name, self.dual
        serial = workers == 1 or len(pairs) == 1
        # threads write their blocks (and mirrors) into out themselves; the
        # workers of a process backend (loky, dask) send them back instead
        shared = serial or shares_memory()
        target = out if shared else None
        bias = self.bias_variance
        tasks = ((dual, kern, bi, bj, SX.take(bi), SY.take(bj), target, symmetric, bias) for bi, bj in pairs)
        # One BLAS thread, in serial too, set before the first block starts.  In
        # parallel the blocks are the parallelism (a multithreaded BLAS inside
        # every thread oversubscribes the cores, and its idle threads spin).  In
        # serial it keeps the bits: a BLAS splits a product among its threads by
        # shape and may then sum an entry in another order, so every block's inner
        # products are those of one thread whatever n_jobs.  A single block
        # (always serial) keeps the caller's threads.
        with one_blas_thread() if len(pairs) > 1 else contextlib.nullcontext():
            if serial:
                for task in tasks:
                    _block_task(*task)
            else:
                for res in map_unordered(_block_task, tasks, workers):
                    if res is not None:
                        _write_block(out, *res, symmetric, bias)

    def device_kernel(self, SX: Samples, SY: Samples | None = None, *, block_size=None):
        """The kernel matrix ``K(X, Y)`` as a float64 torch tensor on the engine's device, never sent to the host.

        The blocks of :meth:`kernel` (the same, bitwise, on the same
        device), assembled where they are computed: for a consumer that
        keeps the kernel on the device (the stored kernel of
        :class:`~sk_deq.ImplicitCKRidge`, a prediction's product with the
        dual coefficients).  Only the few entries of the Hermite route that
        no series degree resolves visit the host (for their quadrature).

        Parameters
        ----------
        SX : Samples
            Prepared rows, from :meth:`prepare`.
        SY : Samples, optional
            Prepared columns; ``K(X, X)`` when omitted (exactly symmetric).
        block_size : int, optional
            Rows and columns per block (by default as :meth:`kernel`'s).

        Returns
        -------
        torch.Tensor of shape (n_samples_X, n_samples_Y)
            Float64, on :attr:`device`.

        Raises
        ------
        ValueError
            If the engine has no device (its kernel is numpy's: :meth:`kernel`).
        """
        if self.device is None:
            raise ValueError(
                "device_kernel needs an engine with a device (ImplicitKernelEngine(..., device='cpu' or 'cuda')); "
                "without one the kernel is computed in numpy on the host: use kernel()."
            )
        symmetric = SY is None
        solver, pairs = self._torch_pairs(SX, SY, block_size)
        diagonal = self.dual.diagonal_values(SX, self.kernel_name) + self.bias_variance if symmetric else None
        with np.errstate(all="ignore"), full_float32_precision():  # float64 blocks; no TF32 in any case
            return solver.kernel_tensor(SX, SY, pairs, self.kernel_name, self.bias_variance, diagonal)

    def _torch_pairs(self, SX, SY, block_size):
        """The torch solver and the blocks of the kernel ``K(X, Y)`` (``Y = X`` for None: the upper triangle's)."""
        solver = self._torch_solver()
        symmetric = SY is None
        n, m = len(SX), len(SX if symmetric else SY)
        b = int(block_size) if block_size is not None else solver.default_block_size(n, m)
        return solver, _block_pairs(n, m, b, symmetric)

    def _torch_kernel(self, SX, SY, block_size, out):
        solver, pairs = self._torch_pairs(SX, SY, block_size)
        with np.errstate(all="ignore"), full_float32_precision():  # float64 blocks; no TF32 in any case
            for bi, bj, blk in solver.blocks(SX, SY, pairs, self.kernel_name):
                _write_block(out, bi, bj, blk, SY is None, self.bias_variance)


def _block_pairs(n: int, m: int, b: int, symmetric: bool) -> list:
    """The (rows, columns) slices of the blocks of ``b`` rows and columns of an ``n x m`` kernel: on and above the
    diagonal only when it is symmetric."""
    rows = [slice(i, min(i + b, n)) for i in range(0, n, b)]
    cols = rows if symmetric else [slice(j, min(j + b, m)) for j in range(0, m, b)]
    return [(bi, bj) for bi in rows for bj in cols if not symmetric or bj.start >= bi.start]


_MIRROR_TILE = 128  # rows of the tiles blocks are mirrored in (cache-sized transposes)


def _write_block(out, bi, bj, blk, symmetric, bias=0.0):
    """Write the kernel block of rows ``bi`` and columns ``bj``, plus ``bias``, into ``out``.

    For blocks solved elsewhere (a process backend's workers, the torch
    engine); the threads solve theirs in place (:func:`_block_task`).  In the
    symmetric case (only blocks on and above the diagonal are solved) the
    block's mirror is written too, from its upper triangle on the diagonal,
    so that ``out`` is exactly symmetric.  The bias is added block by block,
    not in a pass over the whole matrix afterwards: the same sums, each
    rounded once.
    """
    if bias:
        blk = blk + bias
    out[bi, bj] = blk
    if symmetric:
        _mirror_block(out, bi, bj)


def _mirror_block(out, bi, bj):
    """Copy the block of rows ``bi`` and columns ``bj`` of ``out`` onto its mirror image (its upper triangle on the
    diagonal)."""
    if bi == bj:
        _mirror_upper(out[bi, bj], _MIRROR_TILE)
        return
    for t in range(bi.start, bi.stop, _MIRROR_TILE):
        u = min(t + _MIRROR_TILE, bi.stop)
        out[bj, t:u] = out[t:u, bj].T


def _mirror_upper(out, tile):
    """Copy the strict upper triangle of the square ``out`` onto its lower one, tile by tile."""
    n = out.shape[0]
    for i in range(0, n, tile):
        d = out[i : i + tile, i : i + tile]
        il = np.tril_indices(d.shape[0], -1)
        d[il] = d.T[il]
        for j in range(i + tile, n, tile):
            out[j : j + tile, i : i + tile] = out[i : i + tile, j : j + tile].T


def _block_task(dual, kernel, bi, bj, R, C, out, symmetric, bias=0.0):
    """Solve one block; write it plus ``bias`` (and its mirror) into ``out`` when given, else return
    ``(bi, bj, block)`` (the caller adds the bias as it writes)."""
    upper = symmetric and bi == bj  # a diagonal block: its upper triangle solved, then mirrored
    with np.errstate(all="ignore"):
        if out is None:
            return bi, bj, dual.block(R, C, kernel, upper=upper)
        dual.block(R, C, kernel, out=out[bi, bj], bias=bias, upper=upper)  # solved straight into its place
    if symmetric:
        _mirror_block(out, bi, bj)
    return None


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
    device=None,
) -> np.ndarray:
    """Exact infinite-width Implicit-CK, feature kernel or Implicit-NTK of a DEQ.

    Every entry is the fixed point of the Implicit-CK recursion (see
    :ref:`theory-exact`; diagonal entries first, each a scalar fixed point
    in ``||x_i||^2``; then every off-diagonal entry as a scalar equation in
    its correlation), solved to ``tol``.  Closed forms
    give the dual activation for ReLU and leaky ReLU (arc-cosine), erf
    (arcsine), GELU and quadratic activations (and any activation given a
    :class:`~sk_deq.activations.DualFormula`); any other activation uses a
    Hermite expansion with per-sample coefficient vectors (degree chosen per
    block from an exact truncation bound) and polar quadrature for the few
    entries it cannot resolve.

    Parameters
    ----------
    X : array-like of shape (n_samples_X, n_features)
        Samples, one per row (dense and finite).
    Y : array-like of shape (n_samples_Y, n_features), optional
        Second data set; ``K(X, X)`` (symmetric, computed once per pair) when
        omitted.
    activation : str, Activation or callable, default='relu'
        DEQ activation ``phi0``.
    sigma_a2 : float, default=0.2
        Recurrent weight variance in ``(0, 1)``.
    kernel : {'ck', 'feature', 'ntk'}, default='ck'
        ``'ck'``: the Implicit-CK ``G*`` with the ``sigma_b2 x^T y`` input
        injection (Ling et al.'s (2024) kernel); ``'feature'``: ``Sigma* = (G* -
        sigma_b2 x^T y) / sigma_a2``, the Gram matrix of the DEQ features its
        readout sees; ``'ntk'``: the Implicit-NTK ``Sigma* / (1 - sigma_a2
        Sigma-dot*)`` (see :ref:`theory-ntk`).
    tau0 : float, optional
        Data scale fixing the centring constant; measured from ``X`` by
        default.
    sigma_b2 : float, optional
        ``1 - sigma_a2`` by default.
    block_size : int, optional
        Rows and columns per block; by default chosen from scikit-learn's
        ``working_memory``.
    n_jobs : int, optional
        Blocks computed in parallel on threads (through the active joblib
        backend, e.g. ``dask``, when one is configured).
        ``None`` means all cores outside a joblib context or worker
        (:func:`kernel_workers`); ``1`` is serial.  With the same
        ``block_size`` the result does not depend on it.  Ignored with a
        torch ``device``.
    tol : float, default=1e-12
        Tolerance of each entry's fixed point.
    device : None, str or torch.device, optional
        Where the blocks are solved, as :class:`ImplicitKernelEngine`'s
        ``device`` (:func:`sk_deq.resolve_device`): None (the default) for
        the numpy engine, ``'auto'``, ``'cpu'``, ``'cuda'`` or ``'cuda:N'``.

    Returns
    -------
    ndarray of shape (n_samples_X, n_samples_Y)
        The kernel matrix.

    Raises
    ------
    MemoryError
        If the kernel matrix does not fit in the available memory.
    ValueError
        For a ``device`` :func:`sk_deq.resolve_device` refuses.

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
    eng = ImplicitKernelEngine(activation, sigma_a2, t0, kernel=kernel, sigma_b2=sigma_b2, tol=tol, device=device)
    SX = eng.prepare(X)
    if Y is None:
        return eng.kernel(SX, block_size=block_size, n_jobs=n_jobs)
    Y = check_samples(Y, "Y", n_features=X.shape[1])
    return eng.kernel(SX, eng.prepare(Y), block_size=block_size, n_jobs=n_jobs)


def implicit_kernel_diagonal(
    X, *, activation="relu", sigma_a2=0.2, kernel="ck", tau0=None, sigma_b2=None
) -> np.ndarray:
    """Diagonal ``K(x_i, x_i)`` of :func:`implicit_kernel` in O(n) time.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Samples, one per row (dense and finite).
    activation : str, Activation or callable, default='relu'
        DEQ activation ``phi0``.
    sigma_a2 : float, default=0.2
        Recurrent weight variance in ``(0, 1)``.
    kernel : {'ck', 'feature', 'ntk'}, default='ck'
        Which kernel (see :func:`implicit_kernel`).
    tau0 : float, optional
        Data scale fixing the centring constant; measured from ``X`` by
        default.
    sigma_b2 : float, optional
        Input weight variance, ``1 - sigma_a2`` by default.

    Returns
    -------
    ndarray of shape (n_samples,)
        The kernel of every sample with itself, equal to the diagonal of
        ``implicit_kernel(X, ...)``.
    """
    X = check_samples(X)
    t0 = data_tau0(X) if tau0 is None else check_tau0(tau0)
    eng = ImplicitKernelEngine(activation, sigma_a2, t0, kernel=kernel, sigma_b2=sigma_b2)
    return eng.diagonal(eng.prepare(X))
