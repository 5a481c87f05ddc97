"""The contract of a custom fixed-point solver, checked (see :mod:`sk_deq.nn.solvers`).

A solver is called as ``solver(f, z0, tol=..., max_iter=..., **options)``
and returns ``(z, info)``: ``z`` a tensor of the shape of ``z0``, ``info`` a
:class:`~sk_deq.nn.SolverInfo`.  :class:`~sk_deq.nn.DEQLayer` checks a
custom solver with :func:`check_solver_call` before calling it and
:func:`check_solver_result` after, so that a solver breaking the contract
is an error naming it, not one from deep inside the layer (or, for a
tensor of two rows returned alone, two rows taken for ``z`` and ``info``).
"""

from __future__ import annotations

import inspect

import torch

from .solvers import SolverInfo

__all__ = ["check_solver_call", "check_solver_result"]


_CONTRACT = (
    "a fixed-point solver is called as solver(f, z0, tol=..., max_iter=..., **options) and returns the pair "
    "(z, info): z a tensor of the shape of z0, info a sk_deq.nn.SolverInfo (see sk_deq.nn.solvers)"
)


def _name(solver) -> str:
    return getattr(solver, "__name__", None) or repr(solver)


def check_solver_call(solver, options: dict) -> None:
    """Raise a ``TypeError`` naming the contract when ``solver`` cannot be called as a fixed-point solver.

    Parameters
    ----------
    solver : callable
        A custom solver (see the module documentation).
    options : dict
        The keyword arguments it is called with besides ``tol`` and ``max_iter``.

    Raises
    ------
    TypeError
        When ``solver(f, z0, tol=..., max_iter=..., **options)`` does not bind
        to its signature.
    """
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


def check_solver_result(result, solver, z0: torch.Tensor):
    """``(z, info)`` of a solver, checked against the contract (see the module documentation).

    Parameters
    ----------
    result : object
        What ``solver`` returned.
    solver : callable
        The solver (named in the message).
    z0 : torch.Tensor
        The starting point it was given.

    Returns
    -------
    z : torch.Tensor
    info : SolverInfo

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
    return z, info
