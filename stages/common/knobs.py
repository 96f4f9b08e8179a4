"""`g3 train` knobs: how a strategy runs, not what it computes, each declared once as a :class:`TrainKnob`.

A strategy's knobs are a frozen dataclass (``StrategySpec.knobs``): each field made by :func:`knob` from a shared
declaration below, a variant of one (p3's ``--pipeline`` takes none|p3), or its own. Its runtime reads them as
typed attributes (``self.knobs.pipeline``). Everything else is generated from those declarations: `g3 train`'s options and their help, the Python API's
keywords (``g3.train(plan, scheduler="off")``), the run config's attributes and run.json's keys, the checks of a
value, the defaults a worker fills in, `g3 bench`'s ``NAME{knob=value}``, `g3 advise`'s commands and `g3 eval`'s
settings (it evaluates with every knob at its strategy's default).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any


@dataclass(frozen=True)
class TrainKnob:
    """One `g3 train` option of one or more strategies. ``default`` is what a run of a strategy that has the knob
    uses when none is given; ``choices`` (text knobs) the values it takes; ``check(value)`` what is wrong with a
    value beyond its type and choices (None: nothing). A bool knob is a ``--name/--no-name`` flag."""

    name: str  # the run config's attribute, run.json's key, the API's keyword
    type: type  # str, int, float or bool
    default: object
    help: str
    choices: tuple[str, ...] = ()
    metavar: str | None = None
    check: Callable[[object], str | None] | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def command_line(self, value) -> str:
        """The `g3 train` flag that sets ``value``."""
        if self.type is bool:
            return self.flag if value else f"--no-{self.flag[2:]}"
        return f"{self.flag} {value}"

    def problem(self, value) -> str | None:
        """What is wrong with ``value`` for this knob, in words after its flag (None: nothing)."""
        if self.choices and value not in self.choices:
            return f"{value} is not one of {', '.join(self.choices)}"
        return self.check(value) if self.check else None

    def parse(self, text: str):
        """The knob's value from its command-line text (``g3 bench``'s ``NAME{knob=value}``); ValueError: why not."""
        if self.type is bool:
            if text not in ("on", "off", "true", "false"):
                raise ValueError("expected on or off")
            value = text in ("on", "true")
        else:
            try:
                value = self.type(text)
            except ValueError:
                raise ValueError(f"expected {'an integer' if self.type is int else 'a number'}") from None
        wrong = self.problem(value)
        if wrong:
            raise ValueError(wrong)
        return value


def at_least_one(value) -> str | None:
    return None if value >= 1 else "must be >= 1"


def step_count(value) -> str | None:
    """auto | on | off | N (steps ahead, N >= 0)."""
    return (
        None
        if value in ("auto", "on", "off") or str(value).isdigit()
        else f"{value} is not one of auto, on, off or a step count >= 0"
    )


def finite_non_negative(value) -> str | None:
    return None if math.isfinite(value) and value >= 0 else "must be a finite number >= 0"


def prefetch_depth(prefetch: str | None) -> int:
    """What ``--prefetch`` means to a mini-batch strategy (and to a simulator reading a run's config): how many
    steps the sampler thread prepares ahead, 0 for in the step itself. auto, on and None = 2, off = 0, N = N."""
    mode = prefetch or "auto"
    if mode in ("auto", "on"):
        return 2
    return 0 if mode == "off" else int(mode)


# each strategy that has a --pipeline gives its own schedules, default and help (g3's bins, p3's staleness,
# neutrontp's inter-chunk overlap)
PIPELINE = TrainKnob("pipeline", str, "none", help="How the strategy overlaps its work (see each strategy).")

PREFETCH = TrainKnob(
    "prefetch",
    str,
    "auto",
    metavar="[auto|on|off|N]",
    check=step_count,
    help="Mini-batch strategies: a sampler thread prepares up to N steps ahead (sampling, feature fetch); auto/on "
    "= 2, off = 0 (in the step). Same model either way.",
)

BACKWARD = TrainKnob(
    "backward",
    str,
    "auto",
    choices=("auto", "recompute", "keep"),
    help="Backward per bin: recompute the bin's forward (memory bounded by the bin limit) or keep every bin's "
    "activations from the forward pass (faster, more memory); auto keeps them where every layer of a worker "
    "is one bin (its whole partition fits), recomputes otherwise.",
)

LAYER0_CACHE = TrainKnob(
    "layer0_cache",
    str,
    "auto",
    choices=("auto", "on", "off"),
    help="Layer 0's inputs are the fixed node features, so SAGE and GCN can aggregate them once per bin and keep "
    "the result: later epochs run layer 0 as dense products, with no sparse aggregation forward or backward "
    "(same model; GAT ignores it). Costs owned nodes x features of extra memory. 'auto' = on, except for bins "
    "streamed to a GPU (the cache would sit outside the bins' memory budget).",
)

FEATURE_CACHE = TrainKnob(
    "feature_cache",
    bool,
    True,
    help="Fetch remote input features once and keep them (--no-feature-cache: resend them every epoch).",
)

MICRO_BATCHES = TrainKnob(
    "micro_batches",
    int,
    1,
    metavar="N",
    check=at_least_one,
    help="Split each step's batch into N micro-batches whose gradients accumulate into the step's one optimizer "
    "update (gradient accumulation: about 1/N of the step's blocks and activations alive at once). The loss "
    "of each is normalised by the whole step's target count and the sampler draws by node, so the model is "
    "the same as with N = 1.",
)

STREAM_BINS = TrainKnob(
    "stream_bins",
    str,
    "auto",
    choices=("auto", "on", "off"),
    help="g3: read each bin's structure and input features from the plan and the shard on disk as the bin runs "
    "(memory-mapped; under --pipeline intra the next bin is read ahead on a thread) instead of holding the "
    "partition in memory: a worker then holds its node-sized arrays (each layer's rows and gradients, degrees, "
    "labels, remote input features) and two bins, each within the plan's bin limit (g3 plan --device-memory). "
    "Backward recomputes every bin; the eager schedules (inter, multi) run as intra. 'auto' streams where the "
    "workers' partitions held in memory would not fit what the machine has available. Same model either way.",
)


def knob(declaration: TrainKnob, **changes: Any) -> Any:
    """A field of a strategy's knob dataclass: the knob ``declaration`` (with ``changes``: this strategy's variant
    of a shared knob), its default the field's."""
    declaration = replace(declaration, **changes) if changes else declaration
    return field(default=declaration.default, metadata={"knob": declaration})


def declared_knobs(knobs: type) -> tuple[TrainKnob, ...]:
    """The knobs a knob dataclass declares, in field order. A field without a declaration is not a knob: a fixed
    value that a subclass may declare as one (distdgl's micro-batches)."""
    return tuple(replace(f.metadata["knob"], name=f.name) for f in fields(knobs) if "knob" in f.metadata)


@dataclass(frozen=True)
class NoKnobs:
    """The knobs of a strategy that has none."""


@dataclass(frozen=True)
class Layer0CacheKnobs:
    """The knob of the strategies whose layer 0 can keep its aggregated input features."""

    layer0_cache: str = knob(LAYER0_CACHE)

    def layer0_cache_enabled(self, device: str, resident: bool = False) -> bool:
        """auto = on, except for bins streamed to a GPU, where the cache would sit on the device outside the
        bins' memory budget (a resident partition's budget counts it)."""
        return self.layer0_cache == "on" or (self.layer0_cache == "auto" and (device == "cpu" or resident))


@dataclass(frozen=True)
class SamplingKnobs:
    """The knobs of the mini-batch strategies: a sampler thread's lead, and micro-batches (fixed at one unless a
    strategy declares them)."""

    prefetch: str = knob(PREFETCH)
    micro_batches: int = 1

    def prefetch_depth(self) -> int:
        """How many steps the sampler thread prepares ahead (0: in the step itself)."""
        return prefetch_depth(self.prefetch)
