"""Weight gradients of ``F.linear`` accumulated by hand, exactly as autograd accumulates them.

For the layers whose inputs are fixed (layer 0 under ``--layer0-cache``), backward needs no recomputed forward:
the products' inputs are kept on the block and the output's gradient comes from the next layer. What autograd
would do for ``y = F.linear(x, W, b)`` is then three lines, done here in the same operations (``mm(grad.t(),
x)`` is how autograd forms the weight's gradient — ``mm(x.t(), grad).t()`` differs in the last bits; the bias
gets ``grad.sum(0)``) so that the result is bitwise the same (``test_models``).
"""

from __future__ import annotations

import torch


def _accumulate(param: torch.nn.Parameter, grad: torch.Tensor) -> None:
    if param.grad is None:
        param.grad = grad.contiguous()
    else:
        param.grad.add_(grad)


def accumulate_linear_grads(
    grad: torch.Tensor, x: torch.Tensor, weight: torch.nn.Parameter, bias: torch.nn.Parameter | None = None
) -> None:
    """Add to ``weight.grad`` (``[out, in]``) and ``bias.grad`` (``[out]``) the gradients of ``F.linear(x,
    weight, bias)`` for the output gradient ``grad [n, out]``; ``x [n, in]``."""
    _accumulate(weight, torch.mm(grad.t(), x))
    if bias is not None:
        _accumulate(bias, grad.sum(0))
