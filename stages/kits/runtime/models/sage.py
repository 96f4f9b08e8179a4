"""GraphSAGE convolution with the mean aggregator (Hamilton et al., 2017), on a g3 block."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from stages.kits.runtime.block import Block, project_first
from stages.kits.runtime.kernels import block_transpose, csr_mean, csr_mean_grad, csr_mean_rows
from stages.kits.runtime.models.grads import accumulate_linear_grads

# block cache key: src[indices], the arcs' sources as rows of the layer input
ROW_INDICES = "sage_row_indices"


class SAGEConv(nn.Module):
    r"""GraphSAGE-mean layer.

    .. math::
        h_v = W_{self}\, x_v + W_{neigh} \cdot \frac{1}{|N_{in}(v)|} \sum_{u \in N_{in}(v)} x_u + b

    with the mean over zero in-neighbours taken as 0. When ``in_dim > out_dim`` the neighbours are projected
    before they are aggregated (``mean(W_neigh x_u)``, the same value by linearity) so the sparse aggregation
    moves ``out_dim`` instead of ``in_dim`` columns per edge, as DGL's ``SAGEConv`` does.

    Shapes: ``x_src [n_src, in_dim]`` (the first ``block.n_dst`` rows are the destinations) →
    ``[n_dst, out_dim]``.

    Parameters: ``lin_self.weight [out_dim, in_dim]``, ``lin_neigh.weight [out_dim, in_dim]``, ``bias [out_dim]``.
    """

    # the same layer in PyG (`g3 export --format pyg`): torch_geometric.nn.models.GraphSAGE's SAGEConv (mean),
    # whose lin_l takes the neighbours' mean (with the bias) and lin_r the node itself
    PYG_MODEL = "GraphSAGE"
    PYG_NAMES = {"lin_self.weight": "lin_r.weight", "lin_neigh.weight": "lin_l.weight", "bias": "lin_l.bias"}

    static_input_rows = "dst"  # what forward(static_input=True) reads of x_src once its aggregation is cached

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.in_dim, self.out_dim = in_dim, out_dim
        self.lin_self = nn.utils.skip_init(nn.Linear, in_dim, out_dim, bias=False)
        self.lin_neigh = nn.utils.skip_init(nn.Linear, in_dim, out_dim, bias=False)
        self.bias = nn.Parameter(torch.empty(out_dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # the only RNG draws of the layer (its Linear is built with skip_init): manual_seed fixes them
        nn.init.xavier_uniform_(self.lin_self.weight)
        nn.init.xavier_uniform_(self.lin_neigh.weight)
        nn.init.zeros_(self.bias)

    def forward(self, block: Block, x_src: torch.Tensor, static_input: bool = False) -> torch.Tensor:
        """``static_input``: the caller promises that ``x_src`` is the same every time this block is seen (layer 0
        of a runtime whose blocks persist: the input features) and needs no gradient. The mean of the raw
        inputs is then computed once and kept on the block (``[n_dst, in_dim]``), and every later call is two
        dense products, no aggregation forward or backward."""
        n_dst = block.n_dst
        if static_input:
            if x_src.requires_grad:
                raise ValueError("static_input: x_src must not need a gradient")
            agg = block.cached(
                self._static_key(x_src),
                lambda: csr_mean(
                    block.indptr, block.indices, x_src, n_dst, block_transpose(block, x_src)
                ).detach(),
            )
            return F.linear(x_src[:n_dst], self.lin_self.weight, self.bias).add_(
                F.linear(agg, self.lin_neigh.weight)
            )
        # the mean is fused into the aggregation kernel (numba backend): no degree vector, no extra pass
        if project_first(block, self.in_dim, self.out_dim):
            neigh = csr_mean(
                block.indptr,
                block.indices,
                F.linear(x_src, self.lin_neigh.weight),
                n_dst,
                block_transpose(block, x_src),
            )
        else:  # the transposed CSR serves the backward to x_src: none needed for inputs without a gradient
            t = block_transpose(block, x_src) if x_src.requires_grad else None
            neigh = F.linear(csr_mean(block.indptr, block.indices, x_src, n_dst, t), self.lin_neigh.weight)
        # self term and bias in one addmm, then the neighbours added in place: one [n_dst, out] result
        return F.linear(x_src[:n_dst], self.lin_self.weight, self.bias).add_(neigh)

    @staticmethod
    def _static_key(x_src: torch.Tensor) -> str:
        """Block cache key of the static path's mean of the raw inputs."""
        return f"sage_static_mean_{x_src.dtype}_{x_src.shape[1]}"

    def static_backward(self, block: Block, x_src: torch.Tensor, grad: torch.Tensor) -> bool:
        """Weight gradients of ``forward(static_input=True)`` for the gradient of its output ``grad [n_dst,
        out]``, accumulated as autograd would, without running the forward again: the products' inputs are
        the block's cached mean and ``x_src[:n_dst]``. False (nothing done) before the mean is cached."""
        key = self._static_key(x_src)
        if not block.has_cached(key):
            return False
        accumulate_linear_grads(grad, x_src[: block.n_dst], self.lin_self.weight, self.bias)
        accumulate_linear_grads(grad, block.cached(key, None), self.lin_neigh.weight)
        return True

    def reads_rows(self) -> bool:
        """Aggregate-first (``in_dim <= out_dim``): the aggregation reads each source row as it is, so it can read
        them from the layer's input rows (:meth:`forward_rows`); project-first layers transform every source."""
        return self.in_dim <= self.out_dim

    def forward_rows(
        self, block: Block, h: torch.Tensor, src: torch.Tensor, x_dst: torch.Tensor
    ) -> torch.Tensor:
        """:meth:`forward` for ``x_src = h[src]`` without gathering it: the aggregation reads ``h`` through the
        block's arcs mapped to rows of ``h`` (``src[indices]``, kept on the block): the same sums in the same
        order as on the gathered rows. ``x_dst = h[dst] [n_dst, in_dim]``. For a gradient, see
        :meth:`aggregate_rows` and :meth:`aggregate_grad`."""
        return self.combine(x_dst, self.aggregate_rows(block, h, src))

    def aggregate_rows(self, block: Block, h: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        """The mean over in-arcs of ``h[src]`` read in place (``[n_dst, in_dim]``, no gradient to ``h``)."""
        rows = block.cached(ROW_INDICES, lambda: _row_indices(src, block.indices, h.shape[0]))
        return csr_mean_rows(block.indptr, rows, h, block.n_dst)

    def combine(self, x_dst: torch.Tensor, agg: torch.Tensor) -> torch.Tensor:
        """``W_self x_dst + b + W_neigh agg`` (aggregate-first): ``[n_dst, in_dim]`` twice → ``[n_dst, out_dim]``."""
        return F.linear(x_dst, self.lin_self.weight, self.bias).add_(F.linear(agg, self.lin_neigh.weight))

    def aggregate_grad(self, block: Block, agg_grad: torch.Tensor) -> torch.Tensor:
        """The gradient reaching the block's sources through the aggregation (``[n_dst, in_dim]`` →
        ``[n_src, in_dim]``): what :meth:`forward`'s backward gives ``x_src`` besides the self term, bitwise."""
        return csr_mean_grad(
            block.indptr, block.indices, agg_grad, block.n_src, block_transpose(block, agg_grad)
        )

    def extra_repr(self) -> str:
        return f"{self.in_dim}, {self.out_dim}, aggr=mean"


def _row_indices(src: torch.Tensor, indices: torch.Tensor, n_rows: int) -> torch.Tensor:
    """``src[indices]``: each arc's source as a row of the layer input (int32 when the rows allow)."""
    rows = src.index_select(0, indices.long())
    return rows.to(torch.int32) if n_rows < 2**31 - 1 else rows
