"""The ``device`` rule of every estimator, transformer and kernel of sk_deq.

One function, :func:`resolve_device`, turns a ``device`` parameter into
where the work runs.  The networks (:class:`~sk_deq.DEQClassifier` and the
other five estimators), the kernel transformers
(:class:`~sk_deq.ImplicitCKTransformer`, :class:`~sk_deq.ImplicitCKNystroem`),
the Gaussian-process kernel :class:`~sk_deq.ImplicitCKKernel`, the kernel
engine :class:`~sk_deq.kernels.ImplicitKernelEngine` and the kernel
function :func:`~sk_deq.kernels.implicit_kernel` all accept the same
values, with the same meaning, in ``fit`` as in ``predict``/``transform``,
and after unpickling:

* ``None``: the CPU.  The kernels then use their numpy engine, without
  importing torch; the networks run on the CPU.
* ``'auto'``: the current CUDA device when CUDA is available, else the same
  as ``None``.
* ``'cpu'`` or a CPU :class:`torch.device`: torch on the CPU (for the
  networks the same as ``None``).
* ``'cuda'``, ``'cuda:N'`` or a CUDA :class:`torch.device`: that GPU.  A
  machine without CUDA, or without GPU ``N``, is a ``ValueError``.

Anything else is a ``ValueError`` that names the reason: an MPS device has
no float64, which the readout and the exact kernels compute in; a meta
device holds no data; other torch backends are not supported.  The
parameter is resolved anew at every call: a model fitted with
``device='cuda'`` and loaded on a machine without a GPU raises this error at
``predict`` as it would at ``fit``; ``set_params(device='cpu')`` (or
``'auto'``) moves it to the CPU.
"""

from __future__ import annotations

__all__ = ["DEVICE_VALUES", "resolve_device"]

#: The values every ``device`` parameter accepts, as error messages spell them.
DEVICE_VALUES = "None, 'auto', 'cpu', 'cuda', 'cuda:N' or a CPU or CUDA torch.device"

#: Why a device type torch knows is refused.
_REFUSED = {
    "mps": "MPS devices have no float64, which the readout and the exact kernels compute in",
    "meta": "a meta device holds no data (shapes only), so nothing can be computed on it",
}


def resolve_device(device, *, name: str = "device"):
    """The device a ``device`` parameter names, or None for the CPU engine of the caller.

    Torch is imported only for a value other than None.

    Parameters
    ----------
    device : None, str or torch.device
        ``None``, ``'auto'``, ``'cpu'``, ``'cuda'``, ``'cuda:N'`` or a CPU
        or CUDA :class:`torch.device` (see the module's description).
    name : str, default='device'
        The parameter named in error messages.

    Returns
    -------
    torch.device or None
        ``torch.device('cpu')``, a CUDA device, or None for ``None`` and for
        ``'auto'`` without CUDA: the CPU, through the caller's own CPU path
        (the numpy engine for the kernels, torch on the CPU for the
        networks).

    Raises
    ------
    ValueError
        For a value of another type, a string that names no device, a device
        type other than CPU and CUDA, a machine without CUDA or a CUDA index
        it does not have; the message says which.

    Examples
    --------
    >>> from sk_deq import resolve_device
    >>> resolve_device(None) is None
    True
    >>> resolve_device("cpu")
    device(type='cpu')
    >>> resolve_device("mps")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: device='mps' is not supported: MPS devices have no float64, ...
    """
    if device is None:
        return None
    import torch

    use = f"use {name}='auto' (CUDA when available, else the CPU) or {name}='cpu'"
    if isinstance(device, str):
        if device == "auto":
            return torch.device("cuda") if torch.cuda.is_available() else None
        try:
            dev = torch.device(device)
        except RuntimeError as exc:
            raise ValueError(f"{name}={device!r} names no device: {name} must be {DEVICE_VALUES}.") from exc
    elif isinstance(device, torch.device):
        dev = device
    else:
        raise ValueError(f"{name} must be {DEVICE_VALUES}, got {device!r} of type {type(device).__name__}.")
    if dev.type == "cpu":
        return torch.device("cpu")
    if dev.type != "cuda":
        reason = _REFUSED.get(dev.type, f"sk_deq computes on CPUs and CUDA GPUs only, not on {dev.type} devices")
        raise ValueError(f"{name}={device!r} is not supported: {reason}; {use}.")
    if not torch.cuda.is_available():
        raise ValueError(f"{name}={device!r} was requested but CUDA is not available on this machine; {use}.")
    count = torch.cuda.device_count()
    if dev.index is not None and dev.index >= count:
        raise ValueError(
            f"{name}={device!r} was requested but this machine has {count} CUDA device(s), "
            f"'cuda:0' to 'cuda:{count - 1}'; {use}."
        )
    return dev
