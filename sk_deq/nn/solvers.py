"""Batched fixed-point solvers for ``z = f(z)`` (torch).

Every solver has the same signature::

    z, info = solver(f, z0, *, tol=1e-4, max_iter=50, **options)

``f`` maps a tensor of shape ``(batch, ...)`` to one of the same shape and
acts on every sample (row) independently, as a DEQ layer does.

This is also the contract of a custom solver, the callable given as
``fixed_point_solver`` to the DEQ estimators or as ``solver`` to
:class:`~sk_deq.nn.DEQLayer`: it is called as ``solver(f, z0, tol=tol,
max_iter=max_iter, **options)`` (``options``: the layer's
``solver_options``, none from the estimators), and must return the pair
``(z, info)``: ``z`` a tensor of the shape of ``z0`` (the images ``f(z_i)``
at the points reached), ``info`` a :class:`SolverInfo` of the solve (its
``diverged`` makes the layer raise, the estimators record the rest).
:mod:`sk_deq.nn._solver_contract` checks a custom solver's call and
result against it, with an error naming the contract.

Convergence is judged **per sample** with the relative residual

    r_i = ||f(z_i) - z_i|| / ||f(z_i)||,

and a sample that has reached ``tol`` is frozen at ``f(z_i)``: it is not
updated again, so its solution does not depend on which other samples share
the batch, nor on how long they take to converge.  The solvers run on the
device and in the dtype of ``z0``.

Solvers
-------
``'iteration'``
    Plain (Picard) iteration ``z <- f(z)``.
``'anderson'``
    Anderson acceleration (type II, memory ``m``, damping ``beta``) with a
    per-sample least-squares mixing step, as in the DEQ literature (Bai et
    al., 2019; Walker & Ni, 2011), solved in float64 with a regularisation
    *relative* to the residual scale, so that it keeps accelerating once the
    residuals are small.

:data:`SOLVERS` maps names to the functions; :func:`get_solver` resolves a
name or returns a callable unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Callable

import torch

__all__ = ["SolverInfo", "SolverLog", "fixed_point_iteration", "anderson", "SOLVERS", "get_solver"]

_TINY = 1e-30


@dataclass
class SolverInfo:
    """Diagnostics of one batched fixed-point solve.

    Returned by every solver (:func:`fixed_point_iteration`,
    :func:`anderson`); every parameter is stored as an attribute of the same
    name.

    Parameters
    ----------
    solver : str
        Name of the solver.
    n_iter : int
        Number of evaluations of ``f`` the batch needed (the slowest sample).
    rel_residual : float
        Largest per-sample relative residual ``||f(z) - z|| / ||f(z)||`` at the
        points the samples were frozen at (or stopped at).
    tol : float
        The tolerance the residuals were compared with.
    max_iter : int
        The iteration budget.
    converged : bool
        Whether every sample reached ``tol``.
    diverged : bool
        Whether a non-finite value appeared.
    n_samples : int
        Batch size.
    n_not_converged : int
        Number of samples whose residual is still above ``tol``.
    residuals : torch.Tensor
        Per-sample relative residuals (on the solver's device).
    sample_iter : torch.Tensor
        Per-sample number of evaluations of ``f`` until each sample was frozen.
    """

    solver: str
    n_iter: int
    rel_residual: float
    tol: float
    max_iter: int
    converged: bool
    diverged: bool
    n_samples: int
    n_not_converged: int
    residuals: torch.Tensor = field(repr=False)
    sample_iter: torch.Tensor = field(repr=False)

    @property
    def mean_iter(self) -> float:
        """Average number of evaluations of ``f`` per sample."""
        return float(self.sample_iter.double().mean()) if self.sample_iter.numel() else 0.0

    def head(self, n: int) -> SolverInfo:
        """The diagnostics of the first ``n`` samples (e.g. without padding rows).

        Parameters
        ----------
        n : int
            Number of leading samples to keep.

        Returns
        -------
        SolverInfo
            The diagnostics recomputed from the first ``n`` samples'
            residuals and iteration counts (``self`` itself when ``n`` is at
            least the batch size).  ``diverged`` is that of the whole batch.
        """
        n = int(n)
        if n >= self.n_samples:
            return self
        res, iters = self.residuals[:n], self.sample_iter[:n]
        n_bad = int((~(res < self.tol)).sum())
        return SolverInfo(
            solver=self.solver,
            n_iter=int(iters.max()) if n else 0,
            rel_residual=float(res.max()) if n else 0.0,
            tol=self.tol,
            max_iter=self.max_iter,
            converged=(n_bad == 0) and not self.diverged,
            diverged=self.diverged,
            n_samples=n,
            n_not_converged=n_bad,
            residuals=res,
            sample_iter=iters,
        )

    def to_dict(self) -> dict:
        """A summary without the per-sample tensors.

        Returns
        -------
        dict
            Every field but ``residuals`` and ``sample_iter``, plus
            ``mean_iter``; plain Python numbers, JSON-serialisable.
        """
        return {
            "solver": self.solver,
            "n_iter": self.n_iter,
            "mean_iter": self.mean_iter,
            "rel_residual": self.rel_residual,
            "tol": self.tol,
            "max_iter": self.max_iter,
            "converged": self.converged,
            "diverged": self.diverged,
            "n_samples": self.n_samples,
            "n_not_converged": self.n_not_converged,
        }


class SolverLog:
    """The diagnostics of every fixed-point solve of a fit or a prediction, and their summary.

    Used as a context manager over a network: while it is open, every layer
    of the network that solves a fixed point (a :class:`~sk_deq.nn.DEQLayer`)
    adds the :class:`SolverInfo` of each forward and adjoint solve to it.

    Parameters
    ----------
    module : torch.nn.Module
        The network whose solves are recorded (no solve is recorded for a
        network without fixed points).

    Examples
    --------
    >>> import torch
    >>> from sk_deq.nn import DEQLayer
    >>> from sk_deq.nn.solvers import SolverLog
    >>> layer = DEQLayer(3, 16, "tanh", 0.2, 0.0, generator=torch.Generator().manual_seed(0))
    >>> with SolverLog(layer) as log:
    ...     _ = layer.solve(torch.zeros(4, 3))
    >>> log.summary()["n_samples"], log.summary()["converged"]
    (4, True)
    """

    def __init__(self, module) -> None:
        self.layers = [m for m in module.modules() if hasattr(m, "solver_log")]
        self.entries: list = []  # (kind, SolverInfo summary dict)
        self.n_rows = None

    def __enter__(self) -> SolverLog:
        for layer in self.layers:
            layer.solver_log = self
        return self

    def __exit__(self, *exc) -> None:
        for layer in self.layers:
            layer.solver_log = None

    def add(self, kind: str, info: SolverInfo) -> None:
        """Record one solve (``kind``: ``'forward'`` or ``'adjoint'``), its first :attr:`n_rows` samples only."""
        self.entries.append((kind, (info if self.n_rows is None else info.head(self.n_rows)).to_dict()))

    def summary(self) -> dict | None:
        """The forward solves merged (the adjoint ones under ``'adjoint'``); None when nothing was solved.

        Returns
        -------
        dict or None
            ``solver``, ``n_solves``, ``n_iter`` (the largest), ``mean_iter``
            (per sample), ``rel_residual`` (the largest), ``n_samples``,
            ``n_not_converged``, ``tol``, ``max_iter`` and ``converged``.
        """
        summary = None
        for kind in ("forward", "adjoint"):
            infos = [d for k, d in self.entries if k == kind]
            if not infos:
                continue
            n = sum(d["n_samples"] for d in infos)
            merged = {
                "solver": infos[0]["solver"],
                "n_solves": len(infos),
                "n_iter": max(d["n_iter"] for d in infos),
                "mean_iter": sum(d["mean_iter"] * d["n_samples"] for d in infos) / max(n, 1),
                "rel_residual": max(d["rel_residual"] for d in infos),
                "n_samples": n,
                "n_not_converged": sum(d["n_not_converged"] for d in infos),
                "tol": infos[0]["tol"],
                "max_iter": infos[0]["max_iter"],
            }
            merged["converged"] = merged["n_not_converged"] == 0
            summary = merged if kind == "forward" else {**(summary or {}), "adjoint": merged}
        return summary

    def warn(self, owner: str, where: str) -> dict | None:
        """:meth:`summary`, with a ``ConvergenceWarning`` for every kind of solve that did not converge.

        Its advice names the DEQ estimators' ``fixed_point_max_iter`` and ``fixed_point_tol``.
        """
        import warnings

        from sklearn.exceptions import ConvergenceWarning

        summary = self.summary()
        for kind, merged in (("forward", summary), ("adjoint", (summary or {}).get("adjoint"))):
            if merged is None or merged["converged"]:
                continue
            what = "fixed-point" if kind == "forward" else "adjoint (backward) fixed-point"
            warnings.warn(
                f"{owner}: the DEQ {what} solver {merged['solver']!r} did not reach fixed_point_tol="
                f"{merged['tol']:g} within fixed_point_max_iter={merged['max_iter']} iterations on "
                f"{merged['n_not_converged']} of {merged['n_samples']} samples during {where} (largest relative "
                f"residual {merged['rel_residual']:.3g}). Increase fixed_point_max_iter, loosen fixed_point_tol, "
                "or use a smaller sigma_a2.",
                ConvergenceWarning,
                stacklevel=3,
            )
        return summary


def _check(tol, max_iter):
    tol = float(tol)
    if not tol > 0:
        raise ValueError(f"tol must be positive, got {tol!r}.")
    max_iter = int(max_iter)
    if max_iter < 1:
        raise ValueError(f"max_iter must be at least 1, got {max_iter!r}.")
    return tol, max_iter


def _relative_residual(fz: torch.Tensor, z: torch.Tensor, buf: torch.Tensor | None = None) -> torch.Tensor:
    num = torch.linalg.vector_norm(fz - z if buf is None else torch.sub(fz, z, out=buf), dim=1)
    den = torch.linalg.vector_norm(fz, dim=1)
    # A sample whose image is exactly zero: absolute residual.
    return num / torch.where(den > _TINY, den, torch.ones_like(den))


class _Tracker:
    """Per-sample freezing and the bookkeeping shared by the solvers.

    One host read per evaluation of ``f``: the number of samples still
    active (or -1 when an active sample's residual is not finite) comes back
    as a single scalar, so a solve on a GPU waits for the device once per
    iteration.
    """

    def __init__(self, z0: torch.Tensor, tol: float):
        bsz = z0.shape[0]
        self.tol = tol
        self.out = z0.clone()
        self.res = torch.full((bsz,), float("inf"), dtype=z0.dtype, device=z0.device)
        self.iters = torch.zeros(bsz, dtype=torch.long, device=z0.device)
        self.active = torch.ones(bsz, dtype=torch.bool, device=z0.device)
        self.n_active = bsz  # on the host, read once per evaluation
        self.diverged = False
        self.n_eval = 0
        self.buf = torch.empty_like(self.out)  # f(z) - z, reused: no fresh buffer per evaluation

    def update(self, z: torch.Tensor, fz: torch.Tensor) -> bool:
        """Record the evaluation ``fz = f(z)``; return True when all samples are done.

        The solvers must not modify ``fz`` in place afterwards: while every
        sample is active it is kept as the output without a copy.
        """
        self.n_eval += 1
        same = fz.shape == self.buf.shape and fz.dtype == self.buf.dtype and fz.device == self.buf.device
        r = _relative_residual(fz, z, self.buf if same else None)
        self.last = r
        act = self.active
        if self.n_active == act.shape[0]:
            self.out = fz
        else:
            self.out = torch.where(act[:, None], fz, self.out)
        self.res = torch.where(act, r, self.res)
        self.iters = torch.where(act, torch.full_like(self.iters, self.n_eval), self.iters)
        still = act & ~(r < self.tol)
        bad = (act & ~torch.isfinite(r)).any()
        state = int(torch.where(bad, -1, still.sum()))  # the one host read of the evaluation
        if state < 0:
            self.diverged = True
            return True
        self.active, self.n_active = still, state
        return state == 0

    def info(self, name: str, max_iter: int) -> SolverInfo:
        res = self.res
        n_bad = int((~(res < self.tol)).sum())
        worst = float(res.max()) if res.numel() else 0.0
        return SolverInfo(
            solver=name,
            n_iter=self.n_eval,
            rel_residual=worst,
            tol=self.tol,
            max_iter=max_iter,
            converged=(n_bad == 0) and not self.diverged,
            diverged=self.diverged,
            n_samples=int(res.numel()),
            n_not_converged=n_bad,
            residuals=res,
            sample_iter=self.iters,
        )


def _flatten(f: Callable, z0: torch.Tensor):
    shape = z0.shape
    if z0.dim() < 1:
        raise ValueError("z0 must have a leading batch dimension.")
    flat0 = z0.reshape(shape[0], -1)

    def g(z):
        return f(z.reshape(shape)).reshape(shape[0], -1)

    return g, flat0, shape


def fixed_point_iteration(f: Callable, z0: torch.Tensor, *, tol: float = 1e-4, max_iter: int = 50):
    """Plain fixed-point iteration ``z <- f(z)`` with per-sample stopping.

    Parameters
    ----------
    f : callable
        Row-wise map ``f(z)`` on tensors of the shape of ``z0``, returning a
        tensor of the same shape; every sample (row) must be mapped
        independently of the others.
    z0 : torch.Tensor of shape (batch, ...)
        Starting point; the solve runs on its device and in its dtype.
    tol : float, default=1e-4
        Relative residual ``||f(z_i) - z_i|| / ||f(z_i)||`` at which a sample
        is frozen.
    max_iter : int, default=50
        Largest number of evaluations of ``f``.

    Returns
    -------
    z : torch.Tensor of the shape of ``z0``
        The images ``f(z_i)`` at the frozen (or last) iterates.
    info : SolverInfo
        Iterations, residuals and convergence of the batch and of every
        sample.

    Raises
    ------
    ValueError
        If ``tol`` is not positive, ``max_iter`` is below 1 or ``z0`` has no
        batch dimension.

    Examples
    --------
    The contraction ``z -> z / 2 + 1`` has the fixed point 2; the error
    halves at every step:

    >>> import torch
    >>> from sk_deq.nn import fixed_point_iteration
    >>> z, info = fixed_point_iteration(lambda z: 0.5 * z + 1.0, torch.zeros(3, 2), tol=1e-6, max_iter=100)
    >>> z.shape, round(float(z[0, 0]), 4)
    (torch.Size([3, 2]), 2.0)
    >>> info.converged, info.n_iter
    (True, 20)
    """
    tol, max_iter = _check(tol, max_iter)
    g, z, shape = _flatten(f, z0)
    track = _Tracker(z, tol)
    for _ in range(max_iter):
        fz = g(z)
        if track.update(z, fz):
            break
        z = fz
    return track.out.reshape(shape), track.info("iteration", max_iter)


def anderson(
    f: Callable,
    z0: torch.Tensor,
    *,
    tol: float = 1e-4,
    max_iter: int = 50,
    memory: int = 5,
    beta: float = 1.0,
    lam: float = 1e-8,
    stall: int = 10,
):
    """Anderson acceleration with per-sample mixing and stopping.

    At step ``k`` with the last ``n = min(k, memory)`` iterates ``x_j`` and
    images ``f_j = f(x_j)``, the weights ``alpha`` (summing to one) minimise
    ``||sum_j alpha_j (f_j - x_j)||`` for each sample separately, and the new
    iterate is ``beta sum alpha_j f_j + (1 - beta) sum alpha_j x_j``.

    Parameters
    ----------
    f : callable
        The row-wise map, as for :func:`fixed_point_iteration`.
    z0 : torch.Tensor of shape (batch, ...)
        Starting point; the solve runs on its device and in its dtype (the
        mixing problem is solved in float64).
    tol : float, default=1e-4
        Relative residual ``||f(z_i) - z_i|| / ||f(z_i)||`` at which a sample
        is frozen.
    max_iter : int, default=50
        Largest number of evaluations of ``f``.
    memory : int, default=5
        Number of past iterates mixed.
    beta : float, default=1.0
        Damping (mixing) parameter in ``(0, 1]``.
    lam : float, default=1e-8
        Tikhonov regularisation of the mixing problem, relative to the
        largest squared residual norm in the window.
    stall : int, default=10
        Safeguard: a sample whose residual has not improved on its best value
        for ``stall`` consecutive steps continues with plain iteration (Anderson
        can cycle on maps with kinks such as ReLU while plain iteration still
        contracts).  ``0`` disables the safeguard.

    Returns
    -------
    z : torch.Tensor of the shape of ``z0``
        As for :func:`fixed_point_iteration`: the images at the frozen (or
        last) iterates.
    info : SolverInfo
        As for :func:`fixed_point_iteration`.

    Raises
    ------
    ValueError
        If ``tol`` is not positive, ``max_iter`` or ``memory`` is below 1,
        ``beta`` lies outside ``(0, 1]`` or ``z0`` has no batch dimension.

    Examples
    --------
    A small nonlinear contraction, solved to ``1e-8``: Anderson needs far
    fewer evaluations of ``f`` than plain iteration.

    >>> import torch
    >>> from sk_deq.nn import anderson, fixed_point_iteration
    >>> W = torch.tensor([[0.0, -0.9], [0.9, 0.0]], dtype=torch.float64)
    >>> b = torch.tensor([1.0, 0.5], dtype=torch.float64)
    >>> def f(z):
    ...     return torch.tanh(z @ W.T + b)
    >>> z0 = torch.zeros(4, 2, dtype=torch.float64)
    >>> z, info = anderson(f, z0, tol=1e-8, max_iter=200)
    >>> [round(v, 4) for v in z[0].tolist()], info.converged
    ([0.3686, 0.6814], True)
    >>> _, plain = fixed_point_iteration(f, z0, tol=1e-8, max_iter=200)
    >>> info.n_iter < plain.n_iter
    True
    """
    tol, max_iter = _check(tol, max_iter)
    memory, beta = _check_anderson(memory, beta)
    g, x, shape = _flatten(f, z0)
    bsz, dim = x.shape
    track = _Tracker(x, tol)
    # Histories of images f_j and residuals g_j = f_j - x_j; Gram matrix of
    # the residuals kept up to date one row at a time.
    F = torch.zeros(bsz, memory, dim, dtype=x.dtype, device=x.device)
    G = torch.zeros_like(F)
    H = torch.zeros(bsz, memory, memory, dtype=torch.float64, device=x.device)
    eye = torch.eye(memory, dtype=torch.float64, device=x.device)
    best = torch.full((bsz,), float("inf"), dtype=torch.float64, device=x.device)
    stalled = torch.zeros(bsz, dtype=torch.long, device=x.device)
    plain = torch.zeros(bsz, dtype=torch.bool, device=x.device)
    for k in range(max_iter):
        fx = g(x)
        if track.update(x, fx):
            break
        if stall > 0:
            r = track.last.double()
            improved = r < best
            best = torch.where(improved, r, best)
            stalled = torch.where(improved, torch.zeros_like(stalled), stalled + 1)
            plain = plain | (stalled >= stall)
        slot = k % memory
        F[:, slot] = fx
        torch.sub(fx, x, out=G[:, slot])
        n = min(k + 1, memory)
        row = torch.bmm(G[:, :n], G[:, slot, :, None]).squeeze(2).double()  # (bsz, n)
        H[:, slot, :n] = row
        H[:, :n, slot] = row
        if n == 1:
            x = fx
            continue
        mixed, bad = _anderson_mix(H[:, :n, :n], F[:, :n], G[:, :n], lam, beta, eye[:n, :n])
        # A singular mixing problem (e.g. a sample that stopped moving) or a
        # stalled sample: plain step.
        x = torch.where((bad | plain)[:, None], fx, mixed)
    return track.out.reshape(shape), track.info("anderson", max_iter)


def _check_anderson(memory, beta):
    memory = int(memory)
    if memory < 1:
        raise ValueError(f"memory must be at least 1, got {memory!r}.")
    beta = float(beta)
    if not 0.0 < beta <= 1.0:
        raise ValueError(f"beta must lie in (0, 1], got {beta!r}.")
    return memory, beta


def _anderson_mix(Hn, Fn, Gn, lam: float, beta: float, eye):
    """One Anderson mixing step for every sample, from the last ``n`` images and residuals.

    ``Hn`` (bsz, n, n) is the Gram matrix of the residuals ``Gn`` (bsz, n,
    dim), ``Fn`` the images.  Returns the mixed iterates (bsz, dim) and a mask
    of the samples whose mixing problem is singular (their weights are zero).
    """
    bsz, n = Hn.shape[0], Hn.shape[1]
    scale = Hn.diagonal(dim1=1, dim2=2).amax(dim=1).clamp_min(_TINY)
    Hn = Hn + (lam * scale)[:, None, None] * eye
    # min alpha^T H alpha  s.t.  sum(alpha) = 1   ->   alpha = H^-1 1 / (1^T H^-1 1)
    ones = torch.ones(bsz, n, 1, dtype=torch.float64, device=Hn.device)
    sol, status = torch.linalg.solve_ex(Hn, ones)
    alpha = sol / sol.sum(dim=1, keepdim=True)
    bad = (status != 0) | ~torch.isfinite(alpha).all(dim=1).squeeze(1)
    alpha = torch.where(bad[:, None, None], torch.zeros_like(alpha), alpha)
    alpha = alpha.transpose(1, 2).to(Fn.dtype)  # (bsz, 1, n)
    mixed = torch.bmm(alpha, Fn).squeeze(1)
    if beta != 1.0:  # beta sum a f + (1 - beta) sum a x  =  sum a f - (1 - beta) sum a g
        mixed = mixed - (1.0 - beta) * torch.bmm(alpha, Gn).squeeze(1)
    return mixed, bad


#: Fixed-point solvers by name: ``"iteration"`` and ``"anderson"``.
SOLVERS: dict[str, Callable] = {"iteration": fixed_point_iteration, "anderson": anderson}


def get_solver(solver) -> Callable:
    """Resolve a solver name (see :data:`SOLVERS`) or return a callable unchanged.

    Parameters
    ----------
    solver : {'iteration', 'anderson'} or callable
        A name of :data:`SOLVERS`, or a solver with the signature
        ``solver(f, z0, *, tol, max_iter, **options) -> (z, SolverInfo)``
        (the contract of the module documentation).

    Returns
    -------
    callable
        The solver function.

    Raises
    ------
    ValueError
        If ``solver`` is neither a known name nor callable.

    Examples
    --------
    >>> from sk_deq.nn import anderson, get_solver
    >>> get_solver("anderson") is anderson
    True
    """
    if callable(solver):
        return solver
    if isinstance(solver, str) and solver in SOLVERS:
        return SOLVERS[solver]
    raise ValueError(f"Unknown solver {solver!r}; use one of {sorted(SOLVERS)} or a callable.")
