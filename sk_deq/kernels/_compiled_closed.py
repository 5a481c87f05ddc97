"""The Newton iteration of the closed-form duals GELU and erf, compiled when numba is installed.

:class:`~sk_deq.kernels._duals._ClosedFormDual` solves every entry of a block
by Newton on ``g(rho) = s rho - sa F(s rho) - rhs``, with ``F`` the
activation's closed-form dual (:class:`~sk_deq.activations.GeluDual`,
:class:`~sk_deq.activations.ErfDual`).  In numpy one step is some thirty
whole-array operations.  Here it is two: numpy's ``arcsin`` of the step's
``z`` (the only transcendental function of both duals, left to numpy so that
both paths round it alike), then one compiled pass that finishes ``F`` and
``F'``, takes the step, moves ``F`` along and forms the next step's ``z``.
The quantities numpy keeps per entry (``Q = (1 + a_i)(1 + a_j)`` and the
like) are recomputed from the two samples' ``a``, operation for operation.

Every operation is the numpy code's, in the same order and rounded once, so
both give the same bits; ``tests/kernels/test_compiled.py`` checks it.
Without numba, or with ``SK_DEQ_COMPILED=0``, the numpy code runs.
"""

from __future__ import annotations

import functools
import math
import os

import numpy as np

from ._compiled import _BUILD_LOCK, COMPILED_ENV, _clip1, jit_loops

__all__ = ["CompiledClosedForm", "compiled_closed_form"]

_GELU, _ERF = 1, 2  # the loops' ``kind``: the formula they compute
_INV_2PI = 1.0 / (2.0 * math.pi)
_TWO_OVER_PI = 2.0 / math.pi


def compiled_closed_form(formula) -> CompiledClosedForm | None:
    """The compiled Newton steps of ``formula``, or None (another formula, no numba, ``SK_DEQ_COMPILED=0``)."""
    from ..activations._duals import ErfDual, GeluDual

    kind = {GeluDual: _GELU, ErfDual: _ERF}.get(type(formula))  # the exact classes: a subclass may change pair
    if kind is None or os.environ.get(COMPILED_ENV, "").strip() == "0":
        return None
    with _BUILD_LOCK:
        loops = _build()
    return None if loops is None else CompiledClosedForm(kind, *loops)


@functools.cache
def _build():
    return jit_loops(LOOPS, (_clip1, _floor, _z, _pair))


class CompiledClosedForm:
    """One formula's start and Newton steps on a block's entries (see the module).

    Parameters
    ----------
    kind : int
        The formula the loops compute (GELU 1, erf 2).
    start, step : callable
        The compiled :data:`LOOPS`.
    """

    def __init__(self, kind, start, step):
        self.kind, self._start, self._step = kind, start, step

    def start(self, P, R, C, sa: float, sb: float, c: float):
        """``_ClosedFormDual.chunk``'s start of the block ``P`` between samples ``R`` and ``C``.

        Returns ``(s, rhs, rho, zero, state)``: ``s`` (one where it
        vanishes), the right-hand side, the linear start ``rho`` (2-d),
        ``zero`` where ``s`` vanishes, and the state of the entries'
        iteration: flat ``ai``, ``aj`` and the first step's ``z``.
        """
        P = np.ascontiguousarray(P, dtype=np.float64)
        s, rhs, rho, ai, aj, z = (np.empty_like(P) for _ in range(6))
        zero = np.empty(P.shape, dtype=np.bool_)
        vec = [np.ascontiguousarray(v, dtype=np.float64) for v in (R.s, C.s, R.m, C.m, R.dm, C.dm, R.a, C.a)]
        self._start(self.kind, P, *vec, float(sa), float(sb), float(c), s, rhs, rho, ai, aj, z, zero)
        return s, rhs, rho, zero, {"ai": ai.reshape(-1), "aj": aj.reshape(-1), "z": z.reshape(-1)}

    def step(self, rho, s, rhs, state, need_F: bool, sa: float, stop: float):
        """One step of ``_ClosedFormDual._solve`` on flat entries: ``(new, F, D, |step|, bad)``.

        ``state`` (from :meth:`start` or a step before) gets the next step's ``z``.
        """
        asz = np.arcsin(state["z"])
        new, F, D, step, z = (np.empty_like(rho) for _ in range(5))
        bad = np.empty(rho.shape, dtype=np.bool_)
        self._step(
            self.kind,
            rho,
            s,
            rhs,
            state["ai"],
            state["aj"],
            asz,
            float(sa),
            float(stop),
            need_F,
            new,
            F,
            D,
            step,
            z,
            bad,
        )
        state["z"] = z
        return new, F, D, step, bad


# The loops below are plain Python (numba compiles them; they also run, slowly, as they are).
# ``_z`` and ``_pair`` are GeluDual's and ErfDual's ``pre`` and ``pair`` for one entry.


def _floor(R):
    return R if (R >= 1e-300 or R != R) else 1e-300  # np.maximum(R, 1e-300): a NaN stays NaN


def _z(kind, G, ai, aj):
    if kind == _GELU:
        return _clip1(G * (1.0 / np.sqrt((1.0 + ai) * (1.0 + aj))))
    return _clip1(G * (2.0 / np.sqrt((1.0 + 2.0 * ai) * (1.0 + 2.0 * aj))))


def _pair(kind, G, asz, ai, aj):
    """``(F, D)`` at ``G``, ``asz`` the arcsine of ``_z(kind, G, ai, aj)``."""
    if kind == _GELU:
        Q = (1.0 + ai) * (1.0 + aj)
        ab = ai * aj
        one_m_ab, inv_2piQ = 1.0 - ab, 1.0 / (2.0 * math.pi * Q)
        G2 = G * G
        R = _floor(Q - G2)
        sqR = np.sqrt(R)
        base = asz * _INV_2PI + 0.25
        N = (G2 * one_m_ab + ab * Q) * inv_2piQ
        F = G * base + N / sqR
        D = ((((2.0 * one_m_ab) * inv_2piQ) * R + N) * G) / R
        return F, (D + G * _INV_2PI) / sqR + base
    q = np.sqrt((1.0 + 2.0 * ai) * (1.0 + 2.0 * aj))
    R = _floor((q * q) / 4.0 - G * G)
    return asz * _TWO_OVER_PI, _TWO_OVER_PI / np.sqrt(R)


def _start(kind, P, Rs, Cs, Rm, Cm, Rdm, Cdm, Ra, Ca, sa, sb, c, s, rhs, rho, ai, aj, z, zero):
    n, m = P.shape
    for i in range(n):
        for j in range(m):
            sv = Rs[i] * Cs[j]
            zv = sv <= 1e-300
            sv = 1.0 if zv else sv
            rv = sb * P[i, j] + sa * (c * c - c * (Rm[i] + Cm[j]))
            d = ((Rdm[i] * Cdm[j]) * -sa + 1.0) * sv
            r = _clip1(((Rm[i] * Cm[j]) * sa + rv) / d)
            s[i, j], rhs[i, j], rho[i, j], zero[i, j] = sv, rv, r, zv
            ai[i, j], aj[i, j], z[i, j] = Ra[i], Ca[j], _z(kind, sv * r, Ra[i], Ca[j])


def _step(kind, rho, s, rhs, ai, aj, asz, sa, stop, need_F, new, F, D, step, z, bad):
    for e in range(rho.shape[0]):
        r, sv = rho[e], s[e]
        G = sv * r
        f, d = _pair(kind, G, asz[e], ai[e], aj[e])
        g = (f * -sa + G) - rhs[e]
        dg = (d * -sa + 1.0) * sv
        nv = _clip1(r - g / dg)
        st = nv - r
        if need_F:
            f = f + (sv * st) * d
        new[e], F[e], D[e], step[e], bad[e] = nv, f, d, abs(st), abs(st) > stop
        z[e] = _z(kind, sv * nv, ai[e], aj[e])


#: The loops of :class:`CompiledClosedForm`, in the order of its parameters (plain Python until compiled).
LOOPS = (_start, _step)
