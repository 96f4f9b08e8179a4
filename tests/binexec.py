"""Reference bin-by-bin execution for tests: one layer of a :class:`~stages.kits.runtime.models.GNNModel` bin by bin,
forward and backward, in one process, and a block built straight from a global CSR (:func:`build_block`).

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

from stages.kits.runtime.block import Block, gather_rows
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


def build_block(
    indptr: torch.Tensor,
    indices: torch.Tensor,
    dst: torch.Tensor,
    in_degree: torch.Tensor,
    out_degree: torch.Tensor,
    dtype: torch.dtype = torch.float32,
) -> tuple[Block, torch.Tensor]:
    """The block of the destinations ``dst`` (distinct global ids) of a graph given by its global in-edge CSR.

    Returns ``(block, src_ids)``: ``src_ids[i]`` is the global id of local source ``i`` — the destinations first
    (in the order given), then the other in-neighbours in increasing id order. ``in_degree``/``out_degree`` are
    the global degree vectors (indexed by global id). A reference construction: the runtime builds its blocks from
    the plan.
    """
    dst = dst.to(torch.int64)
    n_dst, dev = dst.numel(), dst.device
    pos, local_indptr = gather_rows(indptr.to(torch.int64), dst)
    src_global = indices[pos].to(torch.int64)
    uniq, inv = torch.unique(torch.cat([dst, src_global]), return_inverse=True)
    if int(torch.unique(inv[:n_dst]).numel()) != n_dst:
        raise ValueError("dst contains repeated node ids")
    local = torch.full((uniq.numel(),), -1, dtype=torch.int64, device=dev)
    local[inv[:n_dst]] = torch.arange(n_dst, device=dev)
    rest = local < 0
    local[rest] = n_dst + torch.arange(int(rest.sum()), device=dev)
    src_ids = torch.empty_like(uniq)
    src_ids[local] = uniq
    block = Block(
        n_dst=n_dst,
        n_src=int(uniq.numel()),
        indptr=local_indptr,
        indices=local[inv[n_dst:]],
        src_out_degree=out_degree[src_ids].to(dtype),
        dst_in_degree=in_degree[dst].to(dtype),
        dst_global=dst.clone(),
    )
    return block, src_ids


def validate_block(block: Block) -> None:
    """Raise ``ValueError`` when ``block`` breaks its invariants (O(nnz))."""
    if block.n_src < block.n_dst:
        raise ValueError(f"n_src={block.n_src} < n_dst={block.n_dst}")
    if tuple(block.indptr.shape) != (block.n_dst + 1,):
        raise ValueError(f"indptr has shape {tuple(block.indptr.shape)}, expected ({block.n_dst + 1},)")
    if int(block.indptr[0]) != 0 or int(block.indptr[-1]) != block.nnz:
        raise ValueError("indptr must start at 0 and end at nnz")
    if block.n_dst and bool((block.indptr[1:] < block.indptr[:-1]).any()):
        raise ValueError("indptr is not non-decreasing")
    if block.nnz and (int(block.indices.min()) < 0 or int(block.indices.max()) >= block.n_src):
        raise ValueError("indices out of [0, n_src)")
    if block.src_out_degree.shape[0] != block.n_src or block.dst_in_degree.shape[0] != block.n_dst:
        raise ValueError("degree vectors do not match n_src / n_dst")
    if block.dst_global.shape[0] != block.n_dst:
        raise ValueError("dst_global does not match n_dst")
