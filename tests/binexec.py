"""Run one layer of a :class:`~stages.kits.runtime.models.GNNModel` bin by bin, forward and backward, in one process.

This is the computation pattern of G3's runtime (§5) without the communication: forward computes every bin of
layer ``l`` under ``no_grad`` and keeps only its outputs; backward *recomputes* each bin's forward with the
gathered inputs as leaves, backpropagates the gradient of the bin's outputs (accumulating the weight
gradients in the parameters' ``.grad``), and scatter-adds the input gradients into the gradient of the
previous layer's outputs. tests/test_models.py uses it to prove that bins give what the whole graph gives.

A bin is a triple ``(block, src_rows, dst_rows)``: ``src_rows [n_src]`` are the rows of the layer input ``h_in``
that form ``x_src``, ``dst_rows [n_dst]`` the rows of the layer output (and of its gradient) that the bin's
destinations fill.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from stages.kits.runtime.block import Block
from stages.kits.runtime.kernels import add_rows_at, put_rows_at, take_rows_at

Bin = tuple[Block, torch.Tensor, torch.Tensor]


def forward_bins(
    model,
    layer: int,
    bins: Sequence[Bin],
    h_in: torch.Tensor,
    num_rows: int,
    *,
    epoch: int,
    dropout: float,
    seed: int,
    training: bool,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Layer ``layer`` over all ``bins``: the output ``[num_rows, widths[layer + 1]]`` (rows no bin fills are 0)."""
    device = torch.device(device) if device is not None else h_in.device
    out = h_in.new_zeros((num_rows, model.widths[layer + 1]))
    with torch.no_grad():
        for block, src_rows, dst_rows in bins:
            x_src = take_rows_at(h_in, src_rows).to(device)
            y = model.layer_forward(layer, block.to(device), x_src, epoch, dropout, seed, training)
            put_rows_at(out, dst_rows, y.to(out.device, out.dtype))
    return out


def backward_bins(
    model,
    layer: int,
    bins: Sequence[Bin],
    h_in: torch.Tensor,
    grad_out: torch.Tensor,
    *,
    epoch: int,
    dropout: float,
    seed: int,
    need_input_grad: bool = True,
    device: torch.device | str | None = None,
) -> torch.Tensor | None:
    """Backpropagate ``grad_out`` (gradient of ``forward_bins``' result) through layer ``layer``, bin by bin.

    Weight gradients accumulate into the model's parameters. Returns the gradient of ``h_in`` (same shape),
    or ``None`` when ``need_input_grad`` is false (layer 0: the features need none).
    """
    device = torch.device(device) if device is not None else h_in.device
    grad_in = torch.zeros_like(h_in) if need_input_grad else None
    for block, src_rows, dst_rows in bins:
        x_src = take_rows_at(h_in, src_rows).to(device)
        if need_input_grad:
            x_src.requires_grad_(True)
        with torch.enable_grad():
            y = model.layer_forward(layer, block.to(device), x_src, epoch, dropout, seed, True)
            torch.autograd.backward(y, take_rows_at(grad_out, dst_rows).to(y.device, y.dtype))
        if need_input_grad:
            add_rows_at(grad_in, src_rows, x_src.grad.to(grad_in.device, grad_in.dtype))
    return grad_in
