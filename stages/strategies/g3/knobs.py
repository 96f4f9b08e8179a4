"""The g3 strategy's `g3 train` knobs: its bin schedule (G3 §5.2), prefetch, backward, caches and streaming."""

from __future__ import annotations

from dataclasses import dataclass

from stages.common.cost import usable_cores
from stages.common.knobs import (
    BACKWARD,
    FEATURE_CACHE,
    PIPELINE,
    PREFETCH,
    STREAM_BINS,
    Layer0CacheKnobs,
    TrainKnob,
    knob,
)
from stages.strategies.g3.pipeline import SCHEDULES


@dataclass(frozen=True)
class G3Knobs(Layer0CacheKnobs):
    pipeline: str = knob(
        PIPELINE,
        choices=tuple(SCHEDULES),
        default="multi",
        help="g3: bin scheduling (G3 §5.2): 'multi' = eager inter-layer bins in priority order plus the "
        "intra-layer overlap; 'inter' = eager inter-layer only, bins of consecutive node ids; 'intra' = layer by "
        "layer with the intra-layer overlap: the next bin gathered/copied while one computes (see --prefetch), "
        "messages packed and sent and arrived rows copied in by helper threads; 'none' = sequential. All give "
        "the same model.",
    )
    prefetch: str = knob(
        PREFETCH,
        choices=("auto", "on", "off"),
        check=None,
        metavar=None,
        help="g3: under --pipeline intra/multi, gather (on CUDA also copy in) the next bin on a second thread "
        "while one computes. 'auto' = on for cuda; on the CPU only when the workers leave a core idle (threads x "
        "local workers < cores): otherwise the thread takes a core from the compute kernels and epochs get "
        "slower.",
    )
    backward: str = knob(BACKWARD)
    feature_cache: bool = knob(FEATURE_CACHE)
    stream_bins: str = knob(STREAM_BINS)
    remote_features: str = knob(
        TrainKnob(
            "remote_features",
            str,
            "auto",
            choices=("auto", "epoch", "bin"),
            help="g3, streamed bins: 'epoch' = exchange the remote nodes' input features once and keep them in "
            "TMPDIR (4 B x features per remote row); 'bin' = keep none: each bin fetches its remote sources' rows "
            "from their owners as its inputs are read (on the read-ahead thread, overlapping the bin before), "
            "again in backward's recomputation: more bytes on the network and more reads of the owners' shards, "
            "less disk. 'auto' = 'bin' where TMPDIR's disk cannot take the spill with them. Workers holding their "
            "partition in memory exchange them once. Same model either way.",
        )
    )

    def prefetch_enabled(self, device: str, threads: int, local_workers: int, resident: bool = False) -> bool:
        """Whether ``intra``/``multi`` gather (on CUDA: gather and copy in) the next bin on a second thread.

        auto = on for bins streamed to CUDA, where the copy runs on its own stream while the device computes;
        never for a resident partition (a gather is a device kernel, queued behind the compute anyway); on the
        CPU only when the workers leave a core idle: otherwise the gather thread takes a core from the compute
        kernels and every epoch gets slower (docs/BENCHMARKS.md, "Prefetch on the CPU")."""
        if self.prefetch != "auto":
            return self.prefetch == "on"
        if resident:
            return False
        return device == "cuda" or threads * local_workers < usable_cores()
