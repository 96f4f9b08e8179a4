"""The fused cross-entropy (value and gradient in one pass) equals torch's."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from stages.kits.runtime.loss import cross_entropy_with_grad


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


def test_vectorised_float32_exp_is_accurate():
    """The float32 loss's own exp (written out so it vectorises) is within 2e-7 relative of float64's exp on
    [-87, 0] — no worse than np.exp in float32 — and stays a tiny positive number below."""
    import numba
    import numpy as np

    from stages.kits.runtime.loss import _expf_parts

    @numba.njit
    def expf_nonpositive(x, out):  # out = exp(x) through _expf_parts
        bits = np.empty(x.shape[0], np.int32)
        two_n = bits.view(np.float32)
        for i in range(x.shape[0]):
            out[i], bits[i] = _expf_parts(x[i])
        for i in range(x.shape[0]):
            out[i] *= two_n[i]

    x = np.linspace(-87.0, 0.0, 400_001).astype(np.float32)
    out = np.empty_like(x)
    expf_nonpositive(x, out)
    ref = np.exp(x.astype(np.float64))
    assert float(np.max(np.abs(out - ref) / ref)) <= 2e-7
    assert out[-1] == 1.0
    low = np.array([-87.5, -100.0, -1e4], dtype=np.float32)
    expf_nonpositive(low, out[:3])
    assert bool(((out[:3] > 0) & (out[:3] < 2e-38)).all())


def test_float32_loss_propagates_nan_and_inf():
    """Reordering sums is the only fast-math licence the float32 kernel takes: a diverged row still makes the
    loss NaN instead of a plausible number."""
    z = torch.randn(6, 5)
    z[2, 1] = float("nan")
    z[4, 3] = float("inf")
    labels = torch.zeros(6, dtype=torch.int64)
    for rows in ([2], [4], [0, 2, 5]):
        loss, grad = cross_entropy_with_grad(z, labels, torch.tensor(rows), 6)
        assert torch.isnan(loss), rows
    loss, _ = cross_entropy_with_grad(z, labels, torch.tensor([0, 1, 3, 5]), 6)
    assert torch.isfinite(loss)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_labels_outside_the_classes_are_an_error(dtype):
    """A label beyond the model's classes (or a row beyond the logits) raises instead of writing past the
    gradient."""
    z = torch.randn(8, 4, dtype=dtype)
    for labels, idx in (
        (torch.tensor([0, 1, 2, 3, 4, 0, 1, 2]), torch.arange(8)),
        (torch.tensor([0, 1, 2, 3, -2, 0, 1, 2]), torch.arange(8)),
        (torch.zeros(8, dtype=torch.int64), torch.tensor([0, 8])),
    ):
        with pytest.raises(ValueError, match="outside the logits"):
            cross_entropy_with_grad(z, labels, idx, 8)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_gradient_written_over_the_logits_is_the_same(dtype):
    """``reuse_logits``: the gradient takes the logits' memory (one [n, C] array, not two) and is bitwise the
    gradient of a fresh array, rows outside the training set zero; the loss is the same."""
    g = torch.Generator().manual_seed(5)
    z = (torch.randn(300, 5, generator=g) * 10).to(dtype)
    labels = torch.randint(0, 5, (300,), generator=g)
    idx = torch.randperm(300, generator=g)[:120].sort().values
    loss, grad = cross_entropy_with_grad(z, labels, idx, 200)
    reused = z.clone()
    loss2, grad2 = cross_entropy_with_grad(reused, labels, idx, 200, reuse_logits=True)
    assert grad2.data_ptr() == reused.data_ptr()
    assert torch.equal(grad2, grad) and torch.equal(loss2, loss)
