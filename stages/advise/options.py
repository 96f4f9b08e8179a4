"""What `g3 advise` is told (:class:`AdviseOptions`), its defaults and its checks."""

from __future__ import annotations

from dataclasses import dataclass, replace

from stages.common.errors import G3InputError
from stages.common.settings import setting
from stages.common.units import parse_rate, parse_size
from stages.plan import MODELS
from stages.strategies.registry import strategy_spec

ADVISE_SCHEMA = "g3.advise"
ADVISE_VERSION = 1

DEFAULT_WORKERS = (2,)
DEFAULT_LINKS = ("1gbit",)
DEFAULT_DEVICE_MEMORY = "16GiB"
DEFAULT_BUDGET = 600.0
CALIBRATION_EPOCHS = 3  # the first epoch is dropped by every model: two steady epochs remain
AUTO_CALIBRATE_LINK = "10gbit"  # fast enough that the calibration runs measure compute, not this link
# a negative anchor (the model slower than its calibration run) takes at most half the epoch
ANCHOR_FLOOR = 0.5

# epochs of exact full-graph training to the target (`--target-epochs`): one optimizer step each; how the other
# candidates' epochs follow from it is the convergence model (`--convergence`, CONVERGENCE_MODELS)
DEFAULT_TARGET_EPOCHS = 100
DEFAULT_CONVERGENCE = "steps"
CONVERGENCE_MODELS = {
    "steps": (
        "time to target = epochs to target x predicted epoch, where every candidate takes the same number of "
        "optimizer steps as --target-epochs epochs of full-graph training (one step each): a mini-batch candidate "
        "with S steps an epoch needs ceil(target / S) epochs. Exact for the exact full-graph strategies; for "
        "mini-batch ones checked on Tolokers, K = 2 (docs/BENCHMARKS.md 'Time to target'): they needed 1.05-2.5x "
        "the epochs it gives (sampled gradients are noisier than full-graph ones), the 'epochs' model gave "
        "2.25-7x too many"
    ),
    "epochs": (
        "time to target = target epochs x predicted epoch: every candidate is taken to need the same number of "
        "epochs (--target-epochs). Exact for the exact full-graph strategies; overestimates mini-batch ones, "
        "which take several optimizer steps an epoch (2.25-7x on Tolokers, K = 2: docs/BENCHMARKS.md 'Time to "
        "target')"
    ),
}


def check_rate(text: str, flag: str) -> None:
    """A link rate as `--emulate-link` takes it; bad input is one line naming ``flag``."""
    try:
        parse_rate(text)
    except ValueError as exc:
        raise G3InputError(f"{flag}: {exc}") from None


def parse_links(text: str) -> tuple[str, ...]:
    """``1gbit,10gbit`` → the rates (lower case), each checked as `--emulate-link` checks it; bad input is one
    line naming --link."""
    out = tuple(dict.fromkeys(part.strip().lower() for part in str(text).split(",") if part.strip()))
    for part in out:
        check_rate(part, "--link")
    if not out:
        raise G3InputError("--link: no link rate given (examples: 1gbit or 100mbit,10gbit)")
    return out


def parse_workers(text: str) -> tuple[int, ...]:
    """``2`` or ``2,4,8``: worker counts >= 1; bad input is one line naming --workers."""
    try:
        ks = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise G3InputError(
            f"--workers: not a list of worker counts: {text!r} (examples: 2 or 2,4,8)"
        ) from None
    if not ks:
        raise G3InputError("--workers: no worker count given")
    if any(k < 1 for k in ks):
        raise G3InputError(f"--workers {text}: worker counts must be at least 1")
    return tuple(dict.fromkeys(ks))


def parse_strategies(text: str | None) -> tuple[str, ...] | None:
    """``g3,distdgl`` → those registered strategies (None: all); an unknown name is one line naming the choices."""
    if text is None or not str(text).strip() or str(text).strip().lower() == "all":
        return None
    names = tuple(dict.fromkeys(x.strip() for x in str(text).split(",") if x.strip()))
    for name in names:
        try:
            strategy_spec(name)
        except G3InputError as exc:
            raise G3InputError(f"--strategies: {exc}") from None
    return names


@dataclass
class AdviseOptions:
    """Everything `g3 advise` can be told: each field with a ``setting`` is its option (``g3 advise --help``)."""

    workers: tuple[int, ...] | None = setting(
        None,
        "Worker counts to consider, e.g. 2 or 2,4,8 [default: 2].",
        short="-w",
        parse=parse_workers,
        metavar="K[,K…]",
    )
    links: tuple[str, ...] | None = setting(
        None,
        "Link rates per host and direction to consider, as `g3 train --emulate-link` takes them (100mbit, "
        "1gbit, 10gbit, …) [default: 1gbit].",
        flag="--link",
        parse=parse_links,
        metavar="RATE[,RATE…]",
    )
    device_memory: str | None = setting(
        None,
        "Memory of one worker's device (24GiB, 512MiB, …): g3 and neutrontp size bins and chunks by it; "
        "every candidate's peak memory per worker is checked against it [default: 16GiB].",
        metavar="SIZE",
    )
    cluster: str | None = setting(
        None,
        "A cluster of more than one kind of host (a g3.cluster JSON file: per host kind its count, "
        "workers_per_host, device_memory, link and speed relative to this machine; docs/ARTIFACTS.md 'Cluster "
        "file'): K is its workers, each worker gets its host's link, speed and memory. Replaces --workers, "
        "--link and --device-memory.",
        path="input",
        metavar="FILE",
    )
    model: str = setting("sage", "GNN model.", choices=MODELS)
    layers: int = setting(2, "GNN layers L.")
    hidden: int = setting(16, "Hidden width H (per head for GAT).")
    heads: int = setting(8, "GAT attention heads.")
    strategies: tuple[str, ...] | None = setting(
        None,
        "Only these strategies [default: every registered one, each with its main variants].",
        parse=parse_strategies,
        metavar="S[,S…]",
    )
    budget: float = setting(
        DEFAULT_BUDGET,
        "Seconds of calibration runs on this machine at most; strategies whose run would start "
        "after it are listed as not predicted.",
        metavar="SECONDS",
    )
    calibration_epochs: int = setting(
        CALIBRATION_EPOCHS,
        "Epochs of each calibration run (the profile and each sampling strategy's run; the "
        "first is dropped by the models).",
    )
    # run the calibration runs on emulated hosts joined at this rate (`g3 train --emulate-link`: each host its own
    # cores, as the hosts of the cluster would have) instead of as local processes; None or "local": local;
    # "auto": AUTO_CALIBRATE_LINK where this machine can build emulated hosts, else local
    calibrate_link: str | None = setting(
        "auto",
        "Where the calibration runs run: on emulated hosts joined at RATE (`g3 train --emulate-link`: "
        "each host its own cores, as the cluster's hosts have; needs root), or 'local' processes sharing the "
        "machine's cores; 'auto': emulated hosts at 10gbit where this machine can build them, else local.",
        metavar="RATE|local|auto",
    )
    anchor: bool = setting(
        True,
        "Add to every prediction what its model missed on its own calibration run (measured minus "
        "modelled epoch there; per step for sampling models); --no-anchor: the bare model.",
    )
    target_epochs: int = setting(
        DEFAULT_TARGET_EPOCHS,
        "Epochs exact full-graph training needs to your target accuracy (one optimizer step each).",
    )
    convergence: str = setting(
        DEFAULT_CONVERGENCE,
        "How the other candidates' epochs to the target follow: 'steps', the same "
        "optimizer steps (a mini-batch candidate with S steps an epoch needs target/S epochs), or 'epochs', the "
        "same epochs for all (checked on a real graph: docs/BENCHMARKS.md 'Time to target').",
        choices=tuple(CONVERGENCE_MODELS),
    )
    plans: str | None = setting(
        None,
        "Keep every candidate's partition and plan here; each ranking entry then names its plan and the "
        "`g3 train PLAN --emulate-link RATE` command that runs it as predicted.",
        path="output",
        metavar="PLANS_DIR",
    )
    cache: str | None = setting(
        None,
        "Partitions, plans, the profile and calibration runs, reused by later calls while the store, model "
        "and options are unchanged [default: OUT/cache].",
        path="output",
    )
    latency: float | None = None  # seconds per message [default: g3 simulate's]

    def resolved(self) -> AdviseOptions:
        """The options with the cluster's defaults filled in: a cluster file gives the workers, links and device
        memory (given beside it, they are refused), otherwise those not given take their defaults."""
        if self.cluster is not None:
            given = [
                flag
                for name, flag in (
                    ("workers", "--workers"),
                    ("links", "--link"),
                    ("device_memory", "--device-memory"),
                )
                if getattr(self, name) is not None
            ]
            if given:
                raise G3InputError(
                    f"--cluster gives the workers, links and device memory: drop {', '.join(given)}"
                )
        return replace(
            self,
            workers=DEFAULT_WORKERS if self.workers is None else self.workers,
            links=DEFAULT_LINKS if self.links is None else self.links,
            device_memory=DEFAULT_DEVICE_MEMORY if self.device_memory is None else self.device_memory,
        )


def resolve_calibrate_link(text: str | None) -> str | None:
    """``auto`` → AUTO_CALIBRATE_LINK where emulated hosts can be built here (root or CAP_NET_ADMIN, ip and tc),
    else None (local processes); ``local`` → None; a rate stays."""
    if text == "auto":
        from stages.kits.runtime.launch.netemu import why_not_available

        return AUTO_CALIBRATE_LINK if why_not_available() is None else None
    return None if text in (None, "local") else text


def check_options(options: AdviseOptions, num_nodes: int, cluster=None) -> int:
    from stages.common.model_spec import MODEL_KINDS

    if not options.workers or any(int(k) < 1 for k in options.workers):
        raise G3InputError("--workers: worker counts must be at least 1")
    if max(options.workers) > num_nodes:
        if cluster is not None:
            raise G3InputError(
                f"its {cluster.workers} workers are more than the store's {num_nodes} nodes",
                path=cluster.path,
            )
        raise G3InputError(
            f"--workers {max(options.workers)}: more workers than the store's {num_nodes} nodes"
        )
    if not options.links:
        raise G3InputError("--link: no link rate given")
    for link in options.links if cluster is None else ():  # a cluster's links are checked by its reader
        check_rate(link, "--link")
    try:
        memory = parse_size(options.device_memory)
    except ValueError as exc:
        raise G3InputError(f"--device-memory: {exc}") from None
    if memory <= 0:
        raise G3InputError("--device-memory must be positive")
    if options.model not in MODEL_KINDS:
        raise G3InputError(f"--model {options.model}: not a model (choose from {', '.join(MODEL_KINDS)})")
    if options.layers < 1 or options.hidden < 1 or options.heads < 1:
        raise G3InputError("--layers, --hidden and --heads must be at least 1")
    parse_strategies(",".join(options.strategies or ()))
    if not options.budget > 0:
        raise G3InputError("--budget must be positive (seconds of calibration runs)")
    if options.convergence not in CONVERGENCE_MODELS:
        raise G3InputError(
            f"--convergence must be one of {', '.join(CONVERGENCE_MODELS)}, not {options.convergence!r}"
        )
    if options.target_epochs < 1:
        raise G3InputError("--target-epochs must be at least 1")
    if options.calibrate_link not in (None, "local", "auto"):
        check_rate(options.calibrate_link, "--calibrate-link")
    if options.calibration_epochs < 2:
        raise G3InputError("--calibration-epochs must be at least 2 (the models drop the first epoch)")
    return memory


def latency(options: AdviseOptions) -> float:
    from stages.simulate import SimulateOptions

    return options.latency if options.latency is not None else SimulateOptions().latency
