"""The fused cross-entropy (value and gradient in one pass) equals torch's."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from stages.train.loss import cross_entropy_with_grad


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-6)])
def test_fused_cross_entropy_matches_torch(dtype, tol):
    g = torch.Generator().manual_seed(3)
    z = (torch.randn(500, 7, generator=g) * 20).to(dtype)  # large logits: the log-sum-exp must be stable
    labels = torch.randint(0, 7, (500,), generator=g)
    idx = torch.randperm(500, generator=g)[:180].sort().values
    n_train = 411  # the global count: other workers hold the rest
    loss, grad = cross_entropy_with_grad(z, labels, idx, n_train)

    zt = z.clone().requires_grad_(True)
    expected = F.cross_entropy(zt[idx], labels[idx], reduction="sum") / n_train
    expected.backward()
    assert loss.dtype == dtype
    expected = expected.detach()
    assert abs(float(loss) - float(expected)) <= tol * max(1.0, abs(float(expected)))
    assert torch.allclose(grad, zt.grad, rtol=0, atol=tol)
    rest = torch.ones(500, dtype=torch.bool)
    rest[idx] = False
    assert bool((grad[rest] == 0).all())  # rows outside the training set get no gradient


def test_fused_cross_entropy_other_dtypes_take_the_torch_path():
    z = torch.randn(20, 3).to(torch.bfloat16)
    labels = torch.randint(0, 3, (20,))
    idx = torch.arange(0, 20, 2)
    loss, grad = cross_entropy_with_grad(z, labels, idx, 10)
    zt = z.clone().requires_grad_(True)
    expected = F.cross_entropy(zt[idx], labels[idx], reduction="sum") / 10
    expected.backward()
    assert torch.equal(grad, zt.grad) and float(loss) == float(expected.detach())
