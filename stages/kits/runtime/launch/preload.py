"""What the fork server imports once for training, so that no forked worker pays for it (``processes.py``): what
torch loads only on first use (``torch._dynamo``, imported by the first optimizer) besides what an evaluation
needs (``preload_inference.py``); docs/BENCHMARKS.md, "The test suite", says what it saves. Nothing here starts a
thread or a process group, so the server stays safe to fork."""

from __future__ import annotations

import torch._dynamo  # noqa: F401  (first optimizer)
import torch.optim  # noqa: F401

from stages.kits.runtime.launch import preload_inference  # noqa: F401  (skip_init's import, numba's registries)
