"""Graph attention (Veličković et al., 2018), self-loop included, on a g3 block."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from stages.kits.runtime.block import Block
from stages.kits.runtime.kernels import block_self_loops, csr_sum, edge_softmax, row_ids


class GATConv(nn.Module):
    r"""Multi-head GAT layer.

    .. math::
        z_u = W x_u \in \mathbb{R}^{H \times C}, \qquad
        e^{k}_{uv} = \mathrm{LeakyReLU}\big(a^{k}_{src} \cdot z^{k}_u + a^{k}_{dst} \cdot z^{k}_v\big), \\
        \alpha^{k}_{uv} = \mathrm{softmax}_{u \in N_{in}(v) \cup \{v\}}\, e^{k}_{uv}, \qquad
        h^{k}_v = \sum_{u \in N_{in}(v) \cup \{v\}} \alpha^{k}_{uv} z^{k}_u

    then ``concat=True``: ``h_v = [h^1_v \| ... \| h^H_v] + b`` (``b [H*C]``, hidden layers), or
    ``concat=False``: ``h_v = mean_k h^k_v + b`` (``b [C]``, last layer). Every destination attends to itself
    (the self-loop is added to any arc ``v -> v`` already in the graph). The softmax subtracts the
    per-destination maximum.

    Shapes: ``x_src [n_src, in_dim]`` (the first ``block.n_dst`` rows are the destinations) →
    ``[n_dst, H*C]`` (concat) or ``[n_dst, C]``.

    Parameters: ``lin.weight [H*C, in_dim]``, ``att_src [1, H, C]``, ``att_dst [1, H, C]``, ``bias [H*C or C]``.
    """

    # the same layer in PyG (`g3 export --format pyg`): torch_geometric.nn.models.GAT's GATConv (hidden layers
    # concatenate their heads, the last averages them, as here)
    PYG_MODEL = "GAT"
    PYG_NAMES = {"lin.weight": "lin.weight", "att_src": "att_src", "att_dst": "att_dst", "bias": "bias"}

    def __init__(
        self, in_dim: int, out_dim: int, heads: int = 8, concat: bool = True, negative_slope: float = 0.2
    ):
        super().__init__()
        self.in_dim, self.out_dim, self.heads = in_dim, out_dim, heads
        self.concat, self.negative_slope = concat, negative_slope
        self.lin = nn.utils.skip_init(nn.Linear, in_dim, heads * out_dim, bias=False)
        self.att_src = nn.Parameter(torch.empty(1, heads, out_dim))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_dim))
        self.bias = nn.Parameter(torch.empty(heads * out_dim if concat else out_dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # the only RNG draws of the layer (its Linear is built with skip_init): manual_seed fixes them
        nn.init.xavier_uniform_(self.lin.weight)
        # glorot over (heads, out_dim), as PyG's GATConv
        nn.init.xavier_uniform_(self.att_src.view(self.heads, self.out_dim))
        nn.init.xavier_uniform_(self.att_dst.view(self.heads, self.out_dim))
        nn.init.zeros_(self.bias)

    def forward(self, block: Block, x_src: torch.Tensor, static_input: bool = False) -> torch.Tensor:
        """``static_input`` is accepted for a uniform interface; attention needs the projected inputs anyway."""
        n_dst, heads, c = block.n_dst, self.heads, self.out_dim
        z = self.lin(x_src).view(-1, heads, c)
        score_src = (z * self.att_src).sum(-1)  # [n_src, H]
        score_dst = (z[:n_dst] * self.att_dst).sum(-1)  # [n_dst, H]
        indptr, indices, transpose = block_self_loops(block, z)
        dst = row_ids(indptr, indices.numel())
        e = F.leaky_relu(
            score_src.index_select(0, indices) + score_dst.index_select(0, dst), self.negative_slope
        )
        alpha = edge_softmax(indptr, e)  # [nnz + n_dst, H]
        out = csr_sum(indptr, indices, z, n_dst, alpha, transpose)  # [n_dst, H, C]
        out = out.reshape(n_dst, heads * c) if self.concat else out.mean(dim=1)
        return out + self.bias

    def extra_repr(self) -> str:
        return f"{self.in_dim}, {self.out_dim}, heads={self.heads}, concat={self.concat}"
