"""Torch building blocks: fixed-point solvers, the DEQ layer, the explicit net, training, the readout.

Nothing here derives a formula: centring constants and matched activations
come from :mod:`sk_deq.theory` and :mod:`sk_deq.matching`.
"""

from .layers import DEQDivergenceError, DEQLayer
from .layers import ExplicitNet
from ._fit import LOSSES, TrainingDivergenceError, TrainResult, predict_logits
from .readout import LinearReadout, ReadoutObjective, fit_readout, ridge_readout
from .solvers import SOLVERS, SolverInfo, anderson, fixed_point_iteration, get_solver
from .training import OPTIMIZERS, DEQTrainingDivergenceError, train

__all__ = [
    "DEQLayer",
    "DEQDivergenceError",
    "DEQTrainingDivergenceError",
    "ExplicitNet",
    "LinearReadout",
    "ReadoutObjective",
    "fit_readout",
    "ridge_readout",
    "SOLVERS",
    "SolverInfo",
    "anderson",
    "fixed_point_iteration",
    "get_solver",
    "LOSSES",
    "OPTIMIZERS",
    "TrainResult",
    "TrainingDivergenceError",
    "predict_logits",
    "train",
]
