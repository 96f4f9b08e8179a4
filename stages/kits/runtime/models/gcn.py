"""Graph convolution (Kipf & Welling, 2017) with self-loops and GLOBAL degrees, on a g3 block."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from stages.kits.runtime.block import Block, project_first
from stages.kits.runtime.kernels import block_transpose, csr_sum
from stages.kits.runtime.models.grads import accumulate_linear_grads


class GCNConv(nn.Module):
    r"""GCN layer with symmetric normalisation and self-loops.

    .. math::
        h_v = W \Big( \sum_{u \in N_{in}(v) \cup \{v\}} \frac{x_u}{\sqrt{(d^{out}_u + 1)(d^{in}_v + 1)}} \Big) + b

    where ``d_out``/``d_in`` are the store's GLOBAL degrees **without** the self-loop (``block.src_out_degree``,
    ``block.dst_in_degree``), so a bin computes exactly what the whole graph would, whichever worker owns the
    neighbours. The self-loop is added on top of any arc ``v -> v`` already in the graph. When
    ``in_dim > out_dim`` the inputs are projected first (``W`` commutes with the weighted sum).

    Shapes: ``x_src [n_src, in_dim]`` (the first ``block.n_dst`` rows are the destinations) →
    ``[n_dst, out_dim]``.

    Parameters: ``lin.weight [out_dim, in_dim]``, ``bias [out_dim]``.
    """

    # the same layer in PyG (`g3 export --format pyg`): torch_geometric.nn.models.GCN's GCNConv (self-loops,
    # symmetric normalisation by degrees; PyG takes both from the in-degrees, equal on a symmetric graph)
    PYG_MODEL = "GCN"
    PYG_NAMES = {"lin.weight": "lin.weight", "bias": "bias"}

    static_input_rows = "none"  # what forward(static_input=True) reads of x_src once its sum is cached

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.in_dim, self.out_dim = in_dim, out_dim
        self.lin = nn.utils.skip_init(nn.Linear, in_dim, out_dim, bias=False)
        self.bias = nn.Parameter(torch.empty(out_dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # the only RNG draws of the layer (its Linear is built with skip_init): manual_seed fixes them
        nn.init.xavier_uniform_(self.lin.weight)
        nn.init.zeros_(self.bias)

    def forward(self, block: Block, x_src: torch.Tensor, static_input: bool = False) -> torch.Tensor:
        """``static_input``: as :meth:`SAGEConv.forward` — the normalised sum of the raw inputs is computed once
        per block and kept (``[n_dst, in_dim]``); every later call is one dense product."""
        if static_input:
            if x_src.requires_grad:
                raise ValueError("static_input: x_src must not need a gradient")
            agg = block.cached(self._static_key(x_src), lambda: self.aggregate(block, x_src))
            return F.linear(agg, self.lin.weight, self.bias)
        project = project_first(block, self.in_dim, self.out_dim)
        agg = self.aggregate(block, F.linear(x_src, self.lin.weight) if project else x_src)
        if not project:
            return F.linear(agg, self.lin.weight, self.bias)
        return agg.add_(self.bias)

    def combine(self, x_dst: torch.Tensor | None, agg: torch.Tensor) -> torch.Tensor:
        """``W agg + b`` from the normalised sum ``agg [n, in_dim]`` computed elsewhere (tensor parallelism);
        ``x_dst`` is not read (the self-loop is in ``agg``)."""
        return F.linear(agg, self.lin.weight, self.bias)

    @staticmethod
    def _static_key(x_src: torch.Tensor) -> str:
        """Block cache key of the static path's normalised sum of the raw inputs."""
        return f"gcn_static_agg_{x_src.dtype}_{x_src.shape[1]}"

    def static_backward(self, block: Block, x_src: torch.Tensor, grad: torch.Tensor) -> bool:
        """As :meth:`SAGEConv.static_backward`: the weight gradients from the block's cached normalised sum."""
        key = self._static_key(x_src)
        if not block.has_cached(key):
            return False
        accumulate_linear_grads(grad, block.cached(key, None), self.lin.weight, self.bias)
        return True

    @staticmethod
    def aggregate(block: Block, h: torch.Tensor) -> torch.Tensor:
        """``D_dst^-1/2 (A + I) D_src^-1/2 h`` over the block (global degrees + 1), ``[n_dst, width]``: the
        layer's aggregation alone (also for a runtime that applies the weight to a column slice: P3)."""
        n_dst = block.n_dst
        # the block's normalisation vectors, [n, 1] columns; static, so computed once per block and dtype
        src_norm, dst_norm = block.cached(
            f"gcn_norm_{h.dtype}",
            lambda: (
                (block.src_out_degree.to(h.dtype) + 1.0).rsqrt_()[:, None],
                (block.dst_in_degree.to(h.dtype) + 1.0).rsqrt_()[:, None],
            ),
        )
        h = h * src_norm
        # + h[:n_dst]: the self-loop term (destination v is local source v, one of the first n_dst); the sum is a
        # fresh tensor that no backward needs, so the self-loop and the normalisation are applied in place
        agg = csr_sum(block.indptr, block.indices, h, n_dst, transpose=block_transpose(block, h))
        return agg.add_(h[:n_dst]).mul_(dst_norm)

    def extra_repr(self) -> str:
        return f"{self.in_dim}, {self.out_dim}"
