"""Where each worker's partition will live in training, decided when the plan is made and recorded in it.

Every strategy's plan takes ``--device-memory`` (:data:`DEVICE_MEMORY`, the memory of one worker's device).
When a worker's whole partition — its input features, structure, labels, and every layer's activations and
gradients while they are alive — fits within it, the worker runs *resident*: its tables stay on the device
for the whole run (``g3 train --residency auto`` on a GPU). When it does not, g3's bins stream between host
memory and the device (and a strategy that must hold its whole partition at once cannot run on that device).
plan.json's ``workers[r].residency`` says which and why (docs/ARTIFACTS.md, "Plan").

The footprint is counted with the same bin model as g3's bins (``stages/common/model_spec.py``,
:func:`~stages.common.model_spec.bin_cost`, for the device path's kernels, CUDA's): every layer as one bin
holding the whole partition — its owned nodes as destinations, owned and remote nodes as sources, every
in-arc — summed over the layers, since a training step keeps each layer's activations until its backward,
plus the input rows of owned and remote nodes and the labels.
"""

from __future__ import annotations

import dataclasses

from stages.common.model_spec import ELEM_BYTES, INDEX_BYTES, ModelSpec, bin_costs
from stages.common.plan_options import PlanOption
from stages.common.units import human_bytes, parse_size


def parse_device_memory(text: str) -> int | None:
    if text in (None, "auto"):
        return None
    size = parse_size(text)
    if size <= 0:
        raise ValueError("the device memory must be a positive size, e.g. 8GiB (or auto)")
    return size


DEVICE_MEMORY = PlanOption(
    "device_memory",
    "--device-memory",
    "auto",
    parse=parse_device_memory,
    metavar="SIZE",
    help="Memory of one worker's device, e.g. 24GiB; 'auto' reads GPU 0 (without CUDA: this machine's share for "
    "one of the K workers, of its memory or its memory cgroup's limit, whichever is less). The plan records "
    "whether each worker's whole partition (features, structure, every layer's activations and gradients) "
    "fits there: where it does, g3 train keeps it on the GPU for the run. g3's bins and neutrontp's chunks "
    "each use at most half of it, so one computes while the next is copied in.",
)


# the strategies whose plans are not cut by the device's memory take it only for their residency record
DEVICE_MEMORY_RECORDED = dataclasses.replace(DEVICE_MEMORY, layout=False)


def auto_device_memory(workers: int = 1) -> int:
    """The memory of one worker's device: GPU 0's when CUDA is available. Without CUDA, one share of this machine
    for ``workers`` workers training on it: its memory, or its memory cgroup's limit where less (the memory the
    training will be allowed), less what the launcher and the fork server take, split between the workers, less
    each one's interpreter, three quarters of that for the bins' model (which counts what the kernels hold, not
    the allocator's slack). A plan made where it will train then streams bins that fit, without options."""
    try:
        import torch

        if torch.cuda.is_available():
            return int(torch.cuda.get_device_properties(0).total_memory)
    except Exception:
        pass
    from stages.common.cost import memory_limit
    from stages.kits.runtime.launch.processes import FORK_SERVER_BYTES, PROCESS_BYTES

    total, _ = memory_limit()
    if total is None:
        import psutil

        total = int(psutil.virtual_memory().total)
    share = (total - PROCESS_BYTES - FORK_SERVER_BYTES) // max(1, workers) - PROCESS_BYTES
    return max(share * 3 // 4, MIN_AUTO_DEVICE_MEMORY)


# the least auto gives a worker: below it a bin holds a handful of nodes, and the stage's floor check speaks
MIN_AUTO_DEVICE_MEMORY = 64 << 20


def resident_bytes(spec: ModelSpec, n_own: int, n_remote: int, arcs: int) -> int:
    """A worker's training footprint on the device with its whole partition resident (see the module)."""
    layers = sum(int(c.bytes(n_own, n_own + n_remote, arcs)) for c in bin_costs(spec, "cuda"))
    inputs = (n_own + n_remote) * spec.in_dim * ELEM_BYTES
    return layers + inputs + n_own * INDEX_BYTES  # the labels


def tensor_parallel_bytes(spec: ModelSpec, num_nodes: int, arcs: int, n_own: int, k: int) -> int:
    """neutrontp's footprint with everything resident: the whole graph's structure (its arcs' index, row id and
    transposed index, and per arc the index backend's message of one column slice), per layer four column
    slices of every node (input, aggregation and their gradients, ``ceil(d / K)`` wide) and the owned rows'
    aggregation, output and their gradients, and the input slice."""
    total = arcs * 3 * INDEX_BYTES + (num_nodes + 1) * INDEX_BYTES + n_own * INDEX_BYTES
    for s in spec.layer_shapes():
        c = -(-s.d_in // k)
        total += (
            arcs * c * ELEM_BYTES
            + 4 * num_nodes * c * ELEM_BYTES
            + n_own * (2 * s.d_in + 3 * s.d_out) * ELEM_BYTES
        )
    return total + num_nodes * -(-spec.in_dim // k) * ELEM_BYTES


def residency(spec: ModelSpec, n_own: int, n_remote: int, arcs: int, device_memory: int) -> dict:
    """plan.json's ``residency`` of a worker of a node partition (:func:`resident_bytes`)."""
    return residency_record(resident_bytes(spec, n_own, n_remote, arcs), device_memory)


def residency_record(need: int, device_memory: int) -> dict:
    """plan.json's ``residency`` of one worker that needs ``need`` bytes resident: ``mode`` (``device``: the
    partition fits and stays there; ``host``: it does not, so it lives in host memory), the ``bytes``, the
    ``device_memory`` and ``why`` in words."""
    fits = need <= device_memory
    why = (
        f"its partition needs {human_bytes(need)} on the device (features, structure, every layer's "
        f"activations and gradients): {'within' if fits else 'more than'} the {human_bytes(device_memory)} "
        f"of device memory" + ("" if fits else "; it stays in host memory and moves to the device in parts")
    )
    return {
        "mode": "device" if fits else "host",
        "bytes": int(need),
        "device_memory": int(device_memory),
        "why": why,
    }
