"""Row blocks of one fixed size, so that a sample's outputs do not depend on its batch.

A BLAS library chooses its kernel, its blocking and its split between
threads by the shape of a product: on some libraries and processors the
same row multiplied by the same matrix differs in its last bits (float32)
between a 16-row and a 128-row call.  Padding to a multiple of some row count is not
enough; what holds by construction is that **every** operation on the
predict path sees the same shapes whatever the batch: the rows go through
the network in blocks of exactly :func:`block_rows` rows, the last block
padded with copies of its last row, and each block is computed on its own.
A sample's result then depends only on its own row and on its position in
its block; the elementwise activations are written so that the position does
not matter either (see :mod:`sk_deq.activations`, tested on every named
activation).

GPU libraries may choose kernels by more than the shape; there the outputs
agree across batch sizes to a tolerance (see the user guide), not
promised bitwise.  Blocks on a GPU are larger (:data:`GPU_BLOCK_ENTRIES`,
and :data:`GPU_ONE_PASS_BLOCK_ENTRIES` for the explicit networks, which
compute a block in one pass): one block size per kind of device and of
network.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .._runtime import on_gpu

__all__ = ["GPU_BLOCK_ENTRIES", "GPU_ONE_PASS_BLOCK_ENTRIES", "block_rows", "map_row_blocks"]

#: Rows of a block times the width: a block's product is then about the same
#: size whatever the width (2^16 entries: 64 rows at width 1024).  Smaller
#: blocks cost throughput, larger ones one-sample latency (each row of a block
#: is computed); ``benchmarks/bench_blocks.py`` measures both.
BLOCK_ENTRIES = 1 << 16
#: The fewest and most rows in a block: below 64 rows a wide product is bound
#: by reading the weights; above 1024 rows the padding of a short batch costs
#: more than the calls it saves.
MIN_BLOCK_ROWS, MAX_BLOCK_ROWS = 64, 1024

#: On a GPU a block of 2^16 entries leaves most of the device idle (64 rows at
#: width 4096) and makes one launch and one host sync per fixed-point
#: iteration of every block; 2^20 entries (256 rows at width 4096) keep
#: one-row latency and take most of the gain of larger blocks
#: (``python benchmarks/bench_gpu.py --block-sweep deq``; the figures are on
#: the benchmarks page, "How the defaults were chosen").
GPU_BLOCK_ENTRIES = 1 << 20

#: An explicit network computes a block in one pass (a DEQ iterates on it),
#: so its blocks can be larger before one-row latency grows; at 2^20 entries
#: the host's kernel launches, not the GPU, set the pace of its features
#: (``python benchmarks/bench_gpu.py --block-sweep matched``; the figures are
#: on the benchmarks page, "How the defaults were chosen").
GPU_ONE_PASS_BLOCK_ENTRIES = 1 << 22


def block_rows(width: int, device=None, one_pass: bool = False) -> int:
    """The number of rows in a block of a network of width ``width`` on ``device``.

    A power of two near ``BLOCK_ENTRIES / width`` (on a GPU,
    ``GPU_BLOCK_ENTRIES / width``), between ``MIN_BLOCK_ROWS`` and
    ``MAX_BLOCK_ROWS``: it depends on the width and the kind of device only,
    so every batch a fitted network sees on one device is cut into blocks
    of one shape.

    Parameters
    ----------
    width : int
        The network's width (``n_hidden``).
    device : torch.device or str, optional
        Where the blocks are computed; None is the CPU.
    one_pass : bool, default=False
        Whether the network computes a block in one pass (an explicit
        network) rather than iterating on it (a DEQ): on a GPU its blocks
        hold :data:`GPU_ONE_PASS_BLOCK_ENTRIES`.  On the CPU it changes
        nothing.

    Returns
    -------
    int
        Rows per block.

    Examples
    --------
    >>> from sk_deq.nn import block_rows
    >>> block_rows(32), block_rows(256), block_rows(1024), block_rows(4096)
    (1024, 256, 64, 64)
    >>> block_rows(1024, "cuda"), block_rows(4096, "cuda"), block_rows(4096, "cuda", one_pass=True)
    (1024, 256, 1024)
    """
    if on_gpu(device):
        entries = GPU_ONE_PASS_BLOCK_ENTRIES if one_pass else GPU_BLOCK_ENTRIES
    else:
        entries = BLOCK_ENTRIES
    rows = entries // max(int(width), 1)
    rows = 1 << max(rows.bit_length() - 1, 0)  # the power of two at or below
    return int(min(max(rows, MIN_BLOCK_ROWS), MAX_BLOCK_ROWS))


def map_row_blocks(fn: Callable, x: torch.Tensor, block: int, out: torch.Tensor) -> torch.Tensor:
    """Write ``fn`` of ``x`` into ``out``, computed in blocks of exactly ``block`` rows.

    Parameters
    ----------
    fn : callable
        ``fn(xb, rows)`` maps a block ``xb`` of ``block`` rows, of which the
        first ``rows`` are real (the others copies of the last real row), to
        a tensor with ``block`` rows.
    x : torch.Tensor of shape (n, ...)
        The rows.
    block : int
        Rows per call of ``fn``.
    out : torch.Tensor of shape (n, ...)
        Where the results go (its dtype and device; the padding rows' results
        are dropped).

    Returns
    -------
    torch.Tensor
        ``out``.

    Examples
    --------
    >>> import torch
    >>> from sk_deq.nn import map_row_blocks
    >>> x = torch.arange(5.0).reshape(5, 1)
    >>> map_row_blocks(lambda xb, rows: 2 * xb, x, 4, torch.empty(5, 1)).ravel().tolist()
    [0.0, 2.0, 4.0, 6.0, 8.0]
    """
    n = x.shape[0]
    for start in range(0, n, block):
        xb = x[start : start + block]
        rows = xb.shape[0]
        if rows < block:
            xb = torch.cat([xb, xb[-1:].expand(block - rows, *xb.shape[1:])])
        out[start : start + rows] = fn(xb, rows)[:rows]
    return out
