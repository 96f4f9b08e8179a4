"""The decoupled GCN of NeutronTP (002 §4.1.2, Eq. 7–9 with γ = 1): an MLP, then ``L`` rounds of ``Â``.

.. math::
    Z^0 = \\mathrm{MLP}_L(X), \\qquad Z^k = \\hat A Z^{k-1} \\ (k = 1..L), \\qquad
    \\hat A = \\tilde D_{in}^{-1/2} (A + I) \\tilde D_{out}^{-1/2}

with GCN's normalisation (global degrees + 1, as :class:`~.gcn.GCNConv`). It is a different model from the
coupled GCN (the non-linearities all come before the propagation), trained by ``--model dgcn`` under the
``g3`` strategy and by ``--tp decoupled`` under ``neutrontp``. The runtime runs it as ``L + 1`` blocks:
:class:`DecoupledMLP` (block 0, reads only the destinations' rows) and ``L`` :class:`Propagate` blocks.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from stages.kits.runtime.block import Block
from stages.kits.runtime.kernels import relu_dropout
from stages.kits.runtime.models.gcn import GCNConv


class DecoupledMLP(nn.Module):
    r"""The MLP of the decoupled GCN, on rows: ``widths[0] → … → widths[-1]``.

    .. math::
        h^{i+1} = \mathrm{dropout}(\mathrm{ReLU}(W_i h^i + b_i)) \ (i < L - 1), \qquad
        \mathrm{out} = W_{L-1} h^{L-1} + b_{L-1}

    Dropout after hidden linear ``i`` is the hash mask of (seed, epoch, ``i``, global node id, column), so a row
    gets the same mask wherever it is computed. As a block layer it reads ``x_src[:n_dst]`` only.

    Shapes: ``x [n, widths[0]]`` → ``[n, widths[-1]]``. Parameters: ``lins.{i}.weight [widths[i+1], widths[i]]``,
    ``lins.{i}.bias [widths[i+1]]``.
    """

    activated = False  # GNNModel applies no ReLU/dropout after it: the output feeds the propagation as it is

    def __init__(self, widths: list[int]):
        super().__init__()
        self.widths = list(widths)
        self.lins = nn.ModuleList(
            nn.utils.skip_init(nn.Linear, a, b) for a, b in zip(widths[:-1], widths[1:], strict=True)
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in self.lins:  # the only RNG draws (skip_init): manual_seed fixes them
            nn.init.xavier_uniform_(lin.weight)
            nn.init.zeros_(lin.bias)

    def forward_rows(
        self, x: torch.Tensor, node_ids: torch.Tensor, epoch: int, dropout: float, seed: int, training: bool
    ) -> torch.Tensor:
        """The MLP on rows ``x`` of the nodes ``node_ids`` (global ids, for the dropout masks)."""
        h = x
        for i, lin in enumerate(self.lins):
            h = F.linear(h, lin.weight, lin.bias)
            if i < len(self.lins) - 1:
                h = (
                    relu_dropout(h, seed, epoch, i, node_ids, dropout)
                    if training and dropout > 0.0
                    else F.relu(h)
                )
        return h

    def extra_repr(self) -> str:
        return " → ".join(map(str, self.widths))


class Propagate(nn.Module):
    r"""One propagation round ``Â h`` (no weights): ``[n_src, d]`` → ``[n_dst, d]`` on a block, GCN's
    normalisation with the GLOBAL degrees of the block (:meth:`~.gcn.GCNConv.aggregate`)."""

    activated = False

    def forward(self, block: Block, x_src: torch.Tensor, static_input: bool = False) -> torch.Tensor:
        return GCNConv.aggregate(block, x_src)
