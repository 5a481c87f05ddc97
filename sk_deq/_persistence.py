"""Pickles across versions of sk_deq.

Every estimator, transformer and kernel of the package records in its
pickled state the version of sk_deq that wrote it (:func:`versioned_state`,
called by its ``__getstate__``), as scikit-learn records its own in
``_sklearn_version``.  Loading it under another version warns
(:class:`InconsistentVersionWarning`, from :func:`restored_state`, called by
its ``__setstate__``), and fills in the attributes an earlier version did not
have where a value keeps the pickled object's behaviour (a class's
``_PICKLE_DEFAULTS``).  Pickles of 0.1.0 record no version
(:data:`UNVERSIONED`).

The private names that 0.1.0's pickles refer to and later versions do not
have (:data:`REMOVED_MODULES`, :data:`REMOVED_NAMES`) raise an
:class:`IncompatiblePickleError` that names the version and says to fit
again, instead of pickle's ``ModuleNotFoundError`` or ``AttributeError``
(:func:`install`, run when ``sk_deq`` is imported).
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from typing import NoReturn

from sklearn.exceptions import InconsistentVersionWarning as _SklearnVersionWarning

__all__ = [
    "IncompatiblePickleError",
    "InconsistentVersionWarning",
    "install",
    "restored_state",
    "versioned_state",
]

#: The key of the version in a pickled state.
VERSION_KEY = "_sk_deq_version"

#: The version of a pickle that records none: 0.1.0 recorded none.
UNVERSIONED = "0.1.0"

#: Modules of earlier versions that this one does not have, and the last version that had each.
REMOVED_MODULES = dict.fromkeys(
    (
        "sk_deq._cli_args",
        "sk_deq._comparison",
        "sk_deq._device",
        "sk_deq._export",
        "sk_deq._inputs",
        "sk_deq._param_validation",
        "sk_deq._stream",
        "sk_deq._threads",
        "sk_deq._torch_base",
        "sk_deq._torch_classifier",
        "sk_deq._torch_network",
        "sk_deq._torch_regressor",
        "sk_deq._torch_targets",
        "sk_deq._ttest",
        "sk_deq.activations._torch_forms",
        "sk_deq.kernels.memory",
        "sk_deq.nn._history",
        "sk_deq.nn._lbfgs",
        "sk_deq.nn._random",
        "sk_deq.nn.blocks",
        "sk_deq.nn.deq",
        "sk_deq.nn.explicit",
    ),
    "0.1.0",
)

#: Classes that earlier versions' pickles refer to in modules this version still has, and the last version that
#: had each there.
REMOVED_NAMES = {"sk_deq.theory._coefficients": {"ExplicitCoefficients": "0.1.0"}}


class InconsistentVersionWarning(_SklearnVersionWarning):
    """An object of sk_deq was unpickled under another version of sk_deq than the one that pickled it.

    A subclass of scikit-learn's :class:`~sklearn.exceptions.InconsistentVersionWarning`,
    so that a filter on scikit-learn's category covers sk_deq's objects too;
    its versions are sk_deq's.

    Parameters
    ----------
    estimator_name : str
        The class of the unpickled object.
    current_version : str
        The version of sk_deq that unpickled it.
    original_version : str
        The version of sk_deq that pickled it (``'0.1.0'`` for a pickle that
        records none).

    Attributes
    ----------
    estimator_name, current_version, original_version : str
        The parameters.
    original_sklearn_version, current_sklearn_version : None
        scikit-learn's versions, which this warning does not concern.
    """

    def __init__(self, *, estimator_name: str, current_version: str, original_version: str):
        UserWarning.__init__(self, estimator_name, current_version, original_version)
        self.estimator_name = estimator_name
        self.current_version = current_version
        self.original_version = original_version
        self.original_sklearn_version = self.current_sklearn_version = None

    def __str__(self) -> str:
        return (
            f"Trying to unpickle {self.estimator_name} from sk_deq version {self.original_version} when using "
            f"version {self.current_version}. This might lead to breaking code or invalid results: fit it again "
            "with this version (the changelog lists the versions whose fitted state changed)."
        )


class IncompatiblePickleError(ImportError):
    """A pickle refers to a name of an earlier version of sk_deq that this version does not have: fit again.

    An :class:`ImportError`, which pickle raises for a module it cannot find.
    """


def _current_version() -> str:
    from . import __version__

    return __version__


def versioned_state(state: dict) -> dict:
    """``state`` (what ``__getstate__`` returns) with the version of sk_deq that pickles it."""
    return {**state, VERSION_KEY: _current_version()}


def restored_state(obj, state: dict) -> dict:
    """``state`` without its version, for ``obj.__setstate__``; warns when another version pickled it.

    An attribute of ``obj``'s class ``_PICKLE_DEFAULTS`` (a dict) that
    ``state`` lacks is given its value there: the value that keeps the
    behaviour of a version that did not have the attribute.
    """
    state = dict(state)
    original, current = state.pop(VERSION_KEY, UNVERSIONED), _current_version()
    if original != current:
        warning = InconsistentVersionWarning(
            estimator_name=type(obj).__name__, current_version=current, original_version=original
        )
        warnings.warn(warning, stacklevel=3)
        for name, value in getattr(type(obj), "_PICKLE_DEFAULTS", {}).items():
            state.setdefault(name, value)
    return state


def removed_name(module: str, name: str) -> NoReturn:
    """The module ``__getattr__`` (PEP 562) of a module that lost names: the error for ``module.name``.

    An :class:`IncompatiblePickleError` where an earlier version had the name
    there, else the usual ``AttributeError``.
    """
    version = REMOVED_MODULES.get(module) or REMOVED_NAMES.get(module, {}).get(name)
    if version is None or (name.startswith("__") and name.endswith("__")):
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    current = _current_version()
    raise IncompatiblePickleError(
        f"{module}.{name} exists in sk_deq {version} only, not in sk_deq {current}: an object pickled by sk_deq "
        f"{version} that refers to it cannot be loaded here. Fit it again with sk_deq {current} (or load the pickle "
        f"with sk_deq {version}).",
        name=f"{module}.{name}",
    )


class _RemovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the modules of :data:`REMOVED_MODULES` (after every other finder): each raises for any name in it."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in REMOVED_MODULES:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return None  # the default module

    def exec_module(self, module):
        name = module.__name__
        module.__doc__ = f"{name} exists in sk_deq {REMOVED_MODULES[name]} only: any name of it is an error."
        module.__getattr__ = functools.partial(removed_name, name)


def install() -> None:
    """Put the error of :func:`removed_name` in place of the removed modules and names (once per interpreter)."""
    if not any(isinstance(f, _RemovedModules) for f in sys.meta_path):
        sys.meta_path.append(_RemovedModules())
    for module_name in REMOVED_NAMES:
        module = importlib.import_module(module_name)
        if "__getattr__" not in vars(module):
            module.__getattr__ = functools.partial(removed_name, module_name)  # type: ignore[method-assign]
