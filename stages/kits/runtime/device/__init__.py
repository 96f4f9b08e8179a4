"""The device path: what keeps a training step on the accelerator (residency of a worker's partition, the
device's kernels and sampler) and the counters that hold it to account on any device (:mod:`.op_counter`)."""
