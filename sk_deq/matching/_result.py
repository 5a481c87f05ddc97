"""The result of a match: :class:`MatchResult`, and :class:`MatchingError` when none fits."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..theory import DEQCoefficients, DEQNTKCoefficients, ExplicitCoefficients, KernelCoefficients
from ._problem import EQUATIONS


class MatchingError(ValueError):
    """No explicit network of the requested family matches within tolerance.

    Parameters
    ----------
    problem : str
        What did not match, and by how much.
    advice : str, default=''
        What to try, in the caller's terms (the parameters of
        :func:`~sk_deq.matching.match_explicit`, or of a matched estimator).

    Attributes
    ----------
    problem, advice : str
        The two parts of the message, so that a caller can restate the advice
        in its own parameters.
    """

    def __init__(self, problem: str = "", advice: str = ""):
        super().__init__(f"{problem} {advice}".strip())
        self.problem, self.advice = problem, advice


@dataclass(frozen=True)
class MatchResult:
    """An explicit network whose kernel matches a DEQ's.

    Returned by :func:`match_explicit` (and shared through its cache, so it
    is immutable); every parameter is stored as an attribute of the same
    name.

    Parameters
    ----------
    activation : str
        The DEQ's activation.
    sigma_a2, sigma_b2, tau0 : float
        The DEQ's weight variances and the data scale.
    kernel : {'ck', 'ntk'}
        Which kernel was matched.
    family : str
        Name of the explicit family (see :data:`FAMILIES`).
    kinds : tuple of str
        Layer kinds, first layer first.
    params : tuple of dict
        Parameters of every layer, e.g. ``({'a': 1.21, 'b': 0.005}, ...)``.
    layers : tuple of Activation
        The explicit activations, ready for :func:`sk_deq.theory.explicit_coefficients`
        or :mod:`sk_deq.nn`.
    targets, achieved : KernelCoefficients
        DEQ-side and explicit-side kernel coefficients.
    residuals : ndarray of shape (4,)
        Scale-free residual of M1-M4, ``(achieved - target) / scales``.
    scales : ndarray of shape (4,)
        What each residual is relative to:
        ``|target|``, or a thousandth of the equation's natural scale where
        the target is smaller than that (e.g. zero).
    tol : float
        The tolerance the residuals were checked against.
    explicit : ExplicitCoefficients
        Recursion output: input scale and centring constant of every layer.
    deq : DEQCoefficients or DEQNTKCoefficients
        The DEQ-side solution.
    candidates : tuple of (str, float), default=()
        Families tried and their largest residual (several for ``family='auto'``).
    """

    activation: str
    sigma_a2: float
    sigma_b2: float
    tau0: float
    kernel: str
    family: str
    kinds: tuple
    params: tuple
    layers: tuple
    targets: KernelCoefficients
    achieved: KernelCoefficients
    residuals: np.ndarray
    scales: np.ndarray
    tol: float
    explicit: ExplicitCoefficients = field(repr=False)
    deq: DEQCoefficients | DEQNTKCoefficients = field(repr=False)
    candidates: tuple = ()

    @property
    def max_residual(self) -> float:
        """Largest absolute relative residual."""
        return float(np.max(np.abs(self.residuals)))

    @property
    def n_layers(self) -> int:
        """Number of layers of the explicit network."""
        return len(self.layers)

    @property
    def taus(self) -> tuple:
        """Input scale of every layer (``tau0, tau1, ...``)."""
        return self.explicit.taus

    @property
    def centers(self) -> tuple:
        """Centring constant of every layer at its input scale."""
        return self.explicit.centers

    def to_dict(self) -> dict:
        """A JSON-serialisable summary.

        Returns
        -------
        dict
            The DEQ's configuration and coefficients (``deq``), the family,
            every layer's kind, parameters, input scale and centring constant
            (``layers``), target, achieved value, scale and residual of every
            equation M1-M4 (``equations``), ``max_residual``, ``tol`` and the
            candidates tried.
        """
        t, a = self.targets.equations(), self.achieved.equations()
        return {
            "activation": self.activation,
            "sigma_a2": self.sigma_a2,
            "sigma_b2": self.sigma_b2,
            "tau0": self.tau0,
            "kernel": self.kernel,
            "deq": self.deq.to_dict(),
            "family": self.family,
            "layers": [
                {"kind": k, "params": dict(p), "input_scale": float(s), "center": float(c)}
                for k, p, s, c in zip(self.kinds, self.params, self.taus, self.centers)
            ],
            "equations": {
                name: {
                    "target": float(t[i]),
                    "achieved": float(a[i]),
                    "scale": float(self.scales[i]),
                    "relative_residual": float(self.residuals[i]),
                }
                for i, name in enumerate(EQUATIONS)
            },
            "max_residual": self.max_residual,
            "tol": self.tol,
            "candidates": [{"family": f, "max_residual": r} for f, r in self.candidates],
        }

    def __repr__(self) -> str:
        lines = [
            f"MatchResult({self.kernel.upper()} of {self.activation}-DEQ, sigma_a2={self.sigma_a2:g}, tau0={self.tau0:.6g})",
            f"  family: {self.family} ({self.n_layers} layer{'s' if self.n_layers > 1 else ''})",
        ]
        for i, (k, p, s) in enumerate(zip(self.kinds, self.params, self.taus), 1):
            args = ", ".join(f"{n}={v:.6g}" for n, v in p.items())
            lines.append(f"  layer {i}: {k}({args})  input scale {s:.6g}")
        t, a = self.targets.equations(), self.achieved.equations()
        for i, name in enumerate(EQUATIONS):
            lines.append(f"  {name}: target {t[i]: .6e}  achieved {a[i]: .6e}  residual {self.residuals[i]: .2e}")
        return "\n".join(lines)
