"""Families of explicit networks: layer kinds, their parameters and symmetries, family names (:func:`parse_family`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..activations import Activation, HardTanh, LeakyReLU, Quadratic


@dataclass(frozen=True)
class _Kind:
    cls: type
    names: tuple
    plain: tuple
    lower: tuple  # lower bounds of the two parameters
    # Continuous symmetries: the parameters of k * f(x) are (p * k**emit), those
    # of f(x / k) are (p * k**absorb).  A factor k > 0 moved from a layer's output
    # into the next layer's input leaves every kernel unchanged.
    emit: tuple
    absorb: tuple


#: Layer kinds a family can be built from.
LAYER_KINDS = {
    # a * x, b * x:  k f(x) -> (k a, k b);  f(x / k) -> (a / k, b / k)
    "leaky_relu": _Kind(LeakyReLU, ("a", "b"), (1.0, 0.0), (-np.inf, -np.inf), (1, 1), (-1, -1)),
    # a clip(x, -c, c):  k f(x) -> (k a, c);  f(x / k) -> (a / k, k c)
    "hard_tanh": _Kind(HardTanh, ("a", "c"), (1.0, 1.0), (-np.inf, 1e-6), (1, 0), (-1, 1)),
    # c2 x^2 + c1 x:  k f(x) -> (k c2, k c1);  f(x / k) -> (c2 / k^2, c1 / k)
    "quadratic": _Kind(Quadratic, ("c2", "c1"), (0.0, 1.0), (-np.inf, -np.inf), (1, 1), (-2, -1)),
}


#: Named families: stacks of layer kinds, first layer first.
FAMILIES = {
    "leaky_relu": ("leaky_relu", "leaky_relu"),
    "hard_tanh": ("hard_tanh",),
    "quadratic": ("quadratic",),
    "leaky_relu_quadratic": ("leaky_relu", "quadratic"),
    "quadratic_leaky_relu": ("quadratic", "leaky_relu"),
}


# Candidates tried by family="auto", simplest and Ling et al.'s (2024) choice first.
_AUTO_ODD = (("hard_tanh",), ("hard_tanh", "hard_tanh"))


_AUTO_OTHER = (
    ("leaky_relu", "leaky_relu"),
    ("leaky_relu", "quadratic"),
    ("quadratic", "leaky_relu"),
    ("leaky_relu", "leaky_relu", "leaky_relu"),
)


class _Params(dict):
    """A read-only dict of layer parameters (match results are cached and shared)."""

    def _readonly(self, *args, **kwargs):
        raise TypeError("Parameters of a MatchResult are read-only; copy them with dict(...).")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _readonly
    __ior__ = _readonly

    def __reduce__(self):
        return (_Params, (dict(self),))


def _family_name(kinds: tuple) -> str:
    """The name of a stack of layer kinds; :func:`parse_family` reads it back."""
    for name, k in FAMILIES.items():
        if k == kinds:
            return name
    if len(set(kinds)) == 1:
        return f"{kinds[0]}x{len(kinds)}"
    return "_".join(kinds)


def parse_family(name: str) -> tuple | None:
    """The layer kinds of a family name, or None if ``name`` is not one.

    Accepts every name the package prints: the named :data:`FAMILIES`, a
    single kind repeated (``'leaky_relux3'``, ``'hard_tanhx2'``) and kinds
    joined by underscores (``'hard_tanh_leaky_relu'``).

    Parameters
    ----------
    name : str
        A family name.

    Returns
    -------
    tuple of str or None
        The layer kinds, first layer first, or None if ``name`` names no
        family.

    Examples
    --------
    >>> from sk_deq.matching.families import parse_family
    >>> parse_family("leaky_relux3")
    ('leaky_relu', 'leaky_relu', 'leaky_relu')
    >>> parse_family("hard_tanh_leaky_relu")
    ('hard_tanh', 'leaky_relu')
    >>> parse_family("cubic") is None
    True
    """
    if name in FAMILIES:
        return FAMILIES[name]
    for kind in LAYER_KINDS:
        rest = name[len(kind) :]
        if name.startswith(kind + "x") and rest[1:].isdigit() and int(rest[1:]) >= 1:
            return (kind,) * int(rest[1:])

    def split(text):
        if not text:
            return ()
        for kind in LAYER_KINDS:
            if text == kind:
                return (kind,)
            if text.startswith(kind + "_"):
                tail = split(text[len(kind) + 1 :])
                if tail is not None:
                    return (kind, *tail)
        return None

    kinds = split(name)
    return kinds if kinds and len(kinds) > 1 else None


def _resolve_family(family, n_layers, act: Activation) -> list:
    if isinstance(family, str):
        if family == "auto":
            if n_layers is not None:
                raise ValueError("n_layers cannot be combined with family='auto'.")
            return list(_AUTO_ODD if act.odd else _AUTO_OTHER)
        kinds = parse_family(family)
        if kinds is not None:
            if n_layers is not None:
                if len(set(kinds)) != 1:
                    raise ValueError(f"n_layers applies to single-kind families, not {family!r}.")
                if int(n_layers) < 1:
                    raise ValueError(f"n_layers must be at least 1, got {n_layers!r}.")
                kinds = (kinds[0],) * int(n_layers)
            return [kinds]
        raise ValueError(
            f"Unknown family {family!r}; use 'auto', one of {sorted(FAMILIES)}, a kind repeated such as "
            f"'leaky_relux3', or a sequence of layer kinds from {sorted(LAYER_KINDS)}."
        )
    kinds = tuple(family)
    bad = [k for k in kinds if k not in LAYER_KINDS]
    if not kinds or bad:
        raise ValueError(
            f"A family given as a sequence must list layer kinds from {sorted(LAYER_KINDS)}; got {family!r}."
        )
    if n_layers is not None:
        raise ValueError("n_layers cannot be combined with a family given as a sequence of kinds.")
    return [kinds]
