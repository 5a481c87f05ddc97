"""The contract of a custom fixed-point solver, checked (see :mod:`sk_deq.nn.solvers`).

A solver is called as ``solver(f, z0, tol=..., max_iter=..., **options)``
and returns ``(z, info)``: ``z`` a tensor of the shape of ``z0``, ``info`` a
:class:`~sk_deq.nn.SolverInfo`.  :class:`~sk_deq.nn.DEQLayer` checks a
custom solver with :func:`check_solver_call` before calling it and
:func:`check_solver_result` after, so that a solver breaking the contract
is an error naming it, not one from deep inside the layer (or, for a
tensor of two rows returned alone, two rows taken for ``z`` and ``info``).
The result is not taken on trust: one evaluation of the map at the returned
``z`` measures every sample's residual as the built-in solvers do, and a
solver that reports convergence it did not reach (its start returned, or
one step) is marked not converged, which warns as theirs does.

:func:`check_solver_call` also refuses any solve under
:func:`torch.export.export`: the solvers stop on the data, a loop torch
cannot trace, and the deployable module of an estimator is that of
``to_torch(fixed_iterations=N)``.
"""

from __future__ import annotations

import inspect
from dataclasses import replace

import torch

from .solvers import SolverInfo, _relative_residual

__all__ = ["check_solver_call", "check_solver_result", "measured_info"]


_CONTRACT = (
    "a fixed-point solver is called as solver(f, z0, tol=..., max_iter=..., **options) and returns the pair "
    "(z, info): z a tensor of the shape of z0, info a sk_deq.nn.SolverInfo (see sk_deq.nn.solvers)"
)


def _name(solver) -> str:
    return getattr(solver, "__name__", None) or repr(solver)


def check_solver_call(solver, options: dict, custom: bool = True) -> None:
    """Raise a ``TypeError`` naming the contract when ``solver`` cannot be called as a fixed-point solver.

    Parameters
    ----------
    solver : callable
        A solver (see the module documentation).
    options : dict
        The keyword arguments it is called with besides ``tol`` and ``max_iter``.
    custom : bool, default=True
        Whether it is a custom solver, whose signature is checked (a
        built-in one's is known).

    Raises
    ------
    TypeError
        When ``solver(f, z0, tol=..., max_iter=..., **options)`` does not bind
        to its signature.
    RuntimeError
        Under :func:`torch.export.export` (see the module documentation).
    """
    if torch.compiler.is_exporting():
        raise RuntimeError(
            "A DEQ layer's fixed-point solve stops when its samples converge, a loop on the data that torch.export "
            "cannot trace, so a module holding a sk_deq.nn.DEQLayer (an estimator's module_) cannot be exported. "
            "Export est.to_torch(fixed_iterations=N) instead: the fitted network from raw inputs to the outputs, "
            "a fixed graph of N iterations (see 'Deploying to torch' in the user guide)."
        )
    if not custom:
        return
    try:
        signature = inspect.signature(solver)
    except (TypeError, ValueError):  # no signature to read (some builtins): the call will tell
        return
    try:
        signature.bind(None, None, tol=None, max_iter=None, **options)
    except TypeError as exc:
        raise TypeError(
            f"The fixed-point solver {_name(solver)} cannot be called as one ({exc}): {_CONTRACT}."
        ) from None


def check_solver_result(result, solver, z0: torch.Tensor, f=None, tol: float | None = None):
    """``(z, info)`` of a solver, checked against the contract (see the module documentation).

    Parameters
    ----------
    result : object
        What ``solver`` returned.
    solver : callable
        The solver (named in the message).
    z0 : torch.Tensor
        The starting point it was given.
    f : callable, optional
        The map it was given: with ``tol``, its residuals are measured at
        ``z`` (:func:`measured_info`).
    tol : float, optional
        The tolerance it was given.

    Returns
    -------
    z : torch.Tensor
    info : SolverInfo
        The solver's, with the residuals and convergence measured at ``z``
        when ``f`` and ``tol`` are given.

    Raises
    ------
    TypeError
        When ``result`` is not a pair of a tensor and a :class:`SolverInfo`.
    ValueError
        When ``z`` does not have the shape of ``z0``.
    """
    got = f"{type(result).__name__}" + (f" of shape {tuple(result.shape)}" if isinstance(result, torch.Tensor) else "")
    if not (isinstance(result, (tuple, list)) and len(result) == 2):
        raise TypeError(f"The fixed-point solver {_name(solver)} returned a {got}; {_CONTRACT}.")
    z, info = result
    if not isinstance(z, torch.Tensor) or not isinstance(info, SolverInfo):
        what = f"({type(z).__name__}, {type(info).__name__})"
        raise TypeError(f"The fixed-point solver {_name(solver)} returned the pair {what}; {_CONTRACT}.")
    if z.shape != z0.shape:
        raise ValueError(
            f"The fixed-point solver {_name(solver)} returned z of shape {tuple(z.shape)} for z0 of shape "
            f"{tuple(z0.shape)}; {_CONTRACT}."
        )
    if f is not None and tol is not None:  # measured, and the warning names the solver that ran
        info = replace(measured_info(info, f, z, tol), solver=_name(solver))
    return z, info


def measured_info(info: SolverInfo, f, z: torch.Tensor, tol: float) -> SolverInfo:
    """``info`` with the residuals of one evaluation of ``f`` at ``z``: convergence as the built-in solvers judge it.

    A sample converged when ``||f(z) - z|| / ||f(z)|| < tol``; a non-finite
    residual marks the solve diverged.  The iteration counts stay the
    solver's.
    """
    with torch.no_grad():
        flat = z.reshape(z.shape[0], -1)
        fz = f(z).reshape(flat.shape)
        res = _relative_residual(fz, flat).to(info.residuals.dtype if info.residuals.numel() else fz.dtype)
    bad = ~(res < tol)
    diverged = bool(info.diverged or not torch.isfinite(res).all())
    n_bad = int(bad.sum())
    worst = float(res.max()) if res.numel() else 0.0
    return replace(
        info, rel_residual=worst, tol=float(tol), converged=n_bad == 0 and not diverged, diverged=diverged,
        n_not_converged=n_bad, residuals=res,
    )  # fmt: skip
