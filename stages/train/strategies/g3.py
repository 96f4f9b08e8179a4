"""The G3 hybrid-parallel strategy: bins in priority order, peer-to-peer sharing of layer outputs.

Forward, per layer: compute the worker's bins one by one (``pipeline none``); after each bin, send the rows
that peers need (non-blocking); then wait for the remote inputs of the next layer. Backward, per layer in
reverse: recompute each bin's forward with its gathered inputs as leaves, backpropagate the bin's output
gradients, scatter the input gradients (owned rows stay, remote rows are returned to their owners after the
last bin that reads them), and accumulate the weight gradients locally (the training loop all-reduces them).

By default backward recomputes the bin's forward instead of keeping its activations (``--backward
recompute``): a bin's memory stays bounded by the plan's bin limit in backward too, at the cost of one more
forward per bin. ``--backward keep`` keeps every bin's autograd graph from the forward pass instead —
faster, with memory growing with the whole partition (measured in docs/DESIGN.md).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from ..block import Block
from ..comm import Exchanger
from .base import Strategy, WorkerData


class G3Strategy(Strategy):
    name = "g3"

    def __init__(self, data: WorkerData, model, exchanger: Exchanger, cfg):
        super().__init__(data, model, exchanger, cfg)
        self.num_layers = len(data.layers)
        self.blocks = [self._layer_blocks(li) for li in range(self.num_layers)]
        self.inputs: list[torch.Tensor | None] = [None] * self.num_layers
        self.remote_features: torch.Tensor | None = None
        self.keep = cfg.backward == "keep"  # keep each bin's autograd graph instead of recomputing it
        self.saved: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in range(self.num_layers)]

    # --- static structure --------------------------------------------------------------------------------
    def _layer_blocks(self, li: int) -> list[tuple[Block, torch.Tensor, torch.Tensor]]:
        """(block, source local ids, destination local ids) of every bin of layer ``li``."""
        d, lp = self.data, self.data.layers[li]
        row_ptr = d.row_ptr
        out = []
        for b in range(lp.num_bins):
            r0, r1 = int(lp.bin_ptr[b]), int(lp.bin_ptr[b + 1])
            e0, e1 = int(row_ptr[r0]), int(row_ptr[r1])
            s0, s1 = int(lp.src_ptr[b]), int(lp.src_ptr[b + 1])
            src = torch.from_numpy(np.ascontiguousarray(lp.src[s0:s1], dtype=np.int64))
            dst = torch.from_numpy(np.ascontiguousarray(d.priority[r0:r1], dtype=np.int64))
            block = Block(
                n_dst=r1 - r0,
                n_src=s1 - s0,
                indptr=torch.from_numpy(np.asarray(row_ptr[r0 : r1 + 1] - row_ptr[r0], dtype=np.int64)),
                indices=torch.from_numpy(np.asarray(lp.indices[e0:e1], dtype=np.int64)),
                src_out_degree=d.out_degree[src],
                dst_in_degree=d.in_degree[dst],
                dst_global=d.global_ids[dst],
            )
            out.append((block.to(self.device), src, dst))
        return out

    # --- forward -------------------------------------------------------------------------------------------
    def _input_features(self) -> torch.Tensor:
        """Layer-0 input rows for owned + remote nodes; remote features are fetched once and cached."""
        d = self.data
        if self.remote_features is None or not self.cfg.feature_cache:
            buf = torch.zeros((d.num_remote, d.features.shape[1]), dtype=d.features.dtype)
            out = self.ex.outgoing(d.table("features_send"), "features", 0)
            inc = self.ex.incoming(d.table("features_recv"), "features", 0, d.features.shape[1], d.features.dtype)
            out.send_step(0, d.features)
            inc.finish(lambda nodes, rows: buf.index_copy_(0, nodes, rows))
            out.wait()
            self.remote_features = buf
        return torch.cat([self.data.features, self.remote_features])

    def forward(self, epoch: int, training: bool) -> torch.Tensor:
        d = self.data
        h = self._input_features()
        for li in range(self.num_layers):
            self.inputs[li] = h
            last = li == self.num_layers - 1
            width = self.model.widths[li + 1]
            h_next = torch.zeros((d.num_owned + (0 if last else d.num_remote), width), dtype=h.dtype)
            kind = "fwd" if training else "eval"
            out = None if last else self.ex.outgoing(d.table(f"fwd_send_{li}"), kind, li)
            inc = None if last else self.ex.incoming(d.table(f"fwd_recv_{li}"), kind, li, width, h.dtype)
            keep = self.keep and training
            self.saved[li] = []
            for b, (block, src, dst) in enumerate(self.blocks[li]):
                t0 = time.perf_counter()
                x_src = h.index_select(0, src).to(self.device, non_blocking=True)
                if keep:
                    x_src.requires_grad_(li > 0)
                with torch.set_grad_enabled(keep):
                    y = self.model.layer_forward(li, block, x_src, epoch, self.cfg.dropout, self.cfg.seed, training)
                if keep:
                    self.saved[li].append((x_src, y))
                h_next.index_copy_(0, dst, y.detach().to("cpu", dtype=h.dtype))
                self.timers["compute"] += time.perf_counter() - t0
                if out is not None:
                    out.send_step(b, h_next)
            if inc is not None:
                inc.finish(lambda nodes, rows, h_next=h_next: h_next.index_copy_(0, nodes + d.num_owned, rows))
                out.wait()
            h = h_next
        return h[: d.num_owned]

    # --- backward ------------------------------------------------------------------------------------------
    def backward(self, grad_out: torch.Tensor, epoch: int) -> None:
        d = self.data
        for li in reversed(range(self.num_layers)):
            h = self.inputs[li]
            need_input_grad = li > 0
            grad_in = torch.zeros_like(h) if need_input_grad else None
            out = self.ex.outgoing(d.table(f"bwd_send_{li}"), "bwd", li) if need_input_grad else None
            inc = (self.ex.incoming(d.table(f"bwd_recv_{li}"), "bwd", li, h.shape[1], h.dtype)
                   if need_input_grad else None)
            saved = self.saved[li]
            nb = len(self.blocks[li])
            for step, (block, src, dst) in enumerate(reversed(self.blocks[li])):
                t0 = time.perf_counter()
                if saved:
                    x_src, y = saved[nb - 1 - step]
                else:  # recompute the bin's forward with its inputs as leaves
                    x_src = h.index_select(0, src).to(self.device)
                    x_src.requires_grad_(need_input_grad)
                    with torch.enable_grad():
                        y = self.model.layer_forward(li, block, x_src, epoch, self.cfg.dropout, self.cfg.seed, True)
                torch.autograd.backward(y, grad_out.index_select(0, dst).to(self.device, dtype=y.dtype))
                if need_input_grad:
                    grad_in.index_add_(0, src, x_src.grad.to("cpu", dtype=h.dtype))
                self.timers["compute"] += time.perf_counter() - t0
                if out is not None:
                    out.send_step(step, grad_in, index_offset=d.num_owned)
            if need_input_grad:
                inc.finish(lambda nodes, rows, g=grad_in: g.index_add_(0, nodes, rows))
                out.wait()
                grad_out = grad_in[: d.num_owned]
            self.inputs[li] = None
            self.saved[li] = []
