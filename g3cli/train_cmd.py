"""`g3 train PLAN`."""

from __future__ import annotations

import click

from stages.common.strategies import STRATEGIES
from stages.runtime.config import BACKWARD, DTYPES, LAYER0_CACHE, PIPELINES, RESIDENCY
from stages.runtime.heap import HEAP_POLICIES
from stages.train import TrainConfig, run_train

from .output import print_run_summary
from .paths import OutputPath


def _for(knob: str, default: str | None = None) -> str:
    """The strategies that have a `g3 train` knob (from the registry), to prefix its help."""
    owners = ", ".join(s.name for s in STRATEGIES.values() if knob in s.train_knobs)
    return f"[{owners} plans{'; default ' + default if default else ''}]"


@click.command("train")
@click.argument("plan", type=click.Path())
@click.option("--epochs", type=int, default=10, show_default=True, help="Epochs (a full-graph strategy takes one optimizer step per epoch, a mini-batch one per batch).")
@click.option("--lr", type=float, default=0.01, show_default=True, help="Adam learning rate.")
@click.option("--weight-decay", type=float, default=0.0, show_default=True, help="Adam weight decay.")
@click.option("--dropout", type=float, default=0.5, show_default=True,
              help="Dropout between layers; masks depend only on (seed, epoch, layer, node id), not on K.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the initial weights and dropout masks.")
@click.option("--workers", type=int, default=None,
              help="Local worker processes to spawn; must equal the plan's worker count [default: the plan's]. "
                   "Under torchrun, RANK/WORLD_SIZE/MASTER_ADDR come from the environment instead.")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
              help="Compute device (cuda: one GPU per rank, nccl for all-reduce, gloo for P2P host buffers).")
@click.option("--residency", type=click.Choice(RESIDENCY), default="auto", show_default=True,
              help="Where each worker's partition, activations and gradients live. 'device': on the compute device "
                   "for the whole run, computed by the device's own kernels with no copy in or out (the device "
                   "path; on the CPU it runs what a GPU runs, for checking it). 'host': in host memory, the CPU "
                   "kernels; on a GPU each layer or bin is copied in and out (g3's bins on a copy stream). 'auto': "
                   "'device' on a GPU where the plan found the partition fits the device memory (g3 plan "
                   "--device-memory), else 'host'.")
@click.option("--pipeline", type=click.Choice(PIPELINES), default=None,
              help=_for("pipeline", "multi; p3: none") + " Bin scheduling (G3 §5.2): 'multi' = eager inter-layer bins in priority order plus the "
                   "intra-layer overlap; 'inter' = eager inter-layer only, bins of consecutive node ids; 'intra' = "
                   "layer by layer with the intra-layer overlap: the next bin gathered/copied while one computes "
                   "(see --prefetch), messages packed and sent and arrived rows copied in by helper threads; "
                   "'none' = sequential. All give the same model. neutrontp: 'none' = one bulk all-to-all per "
                   "split/gather; any other value = the inter-chunk pipeline (NeutronTP §4.2.2: the split of the "
                   "next chunk and the gather of the last run on a communication thread while a chunk aggregates; "
                   "the same model, bitwise). p3 (default 'none'): 'p3' = P3's staleness with weight stashing: "
                   "batch t computes with the weights before update t-3 and its gradient updates the current ones "
                   "(P3 Eq. 3, a different model); the next three batches' partials travel while this one computes its "
                   "data-parallel phase (up to four batches in flight).")
@click.option("--trace", is_flag=True,
              help="Time every span of every epoch but the first: the shares of communication time hidden under "
                   "compute, spent blocked on messages and overlapping the runtime's data movement go to each "
                   "epoch's metrics record, and the last epoch's timeline to RUN/trace/rank-N.json "
                   "(Chrome trace, for Perfetto or chrome://tracing).")
@click.option("--profile", type=OutputPath(), default=None,
              help="Write PROFILE.json: compute seconds per arc, node and bin of each layer on this device, fitted "
                   "from the last epoch's bins, the warmest (input of `g3 simulate --profile`).")
@click.option("--count-ops", is_flag=True,
              help="Count the aten operations one steady-state training step dispatches (the first step of the second "
                   "epoch) and those that make the host wait for the device (a value read back, nonzero, unique, "
                   "a boolean mask, a copy to the host): ops_per_step, sync_ops_per_step and both by operation name "
                   "in that epoch's metrics record, per worker. What a GPU pays per step besides the arithmetic.")
@click.option("--eval-every", type=int, default=None,
              help="Evaluate train/valid/test accuracy every N epochs (0: never) [default: 1; with --resume: the "
                   "run's].")
@click.option("--checkpoint-every", type=int, default=None,
              help="Write a checkpoint every N epochs (0: never) [default: 0; with --resume: the run's].")
@click.option("--resume", is_flag=True, help="Continue the run in RUN from its latest checkpoint.")
@click.option("--logger", "loggers", type=click.Choice(["csv", "tensorboard"]), multiple=True,
              help="Also log every epoch's figures to RUN/metrics.csv (csv) or TensorBoard event files in "
                   "RUN/tensorboard (tensorboard: pip install 'g3[tensorboard]'); repeatable. RUN/metrics.jsonl is "
                   "always written.")
@click.option("--metric", type=click.Choice(["accuracy", "rocauc"]), default="accuracy", show_default=True,
              help="Evaluation metric besides accuracy: rocauc adds each split's ROC-AUC (binary tasks, e.g. the "
                   "imbalanced Tolokers) to the metrics records.")
@click.option("--no-feature-cache", is_flag=True, default=None,
              help=_for("feature_cache") + " Resend remote input features every epoch instead of once.")
@click.option("--layer0-cache", type=click.Choice(LAYER0_CACHE), default=None,
              help=_for("layer0_cache", "auto") + " Layer 0's inputs are the fixed node features, so SAGE and GCN can aggregate them once per bin and "
                   "keep the result: later epochs run layer 0 as dense products, with no sparse aggregation forward "
                   "or backward (same model; GAT ignores it). Costs owned nodes x features of extra memory. "
                   "'auto' = on for --device cpu, off for cuda (the cache would sit outside the bins' memory budget). "
                   "neutrontp (naive TP): layer 0's aggregation of the feature slices and its gather into owned rows "
                   "happen in the first epoch only, unless 'off'.")
@click.option("--prefetch", type=str, default=None, metavar="[auto|on|off|N]",
              help=_for("prefetch", "auto") + " g3: under --pipeline intra/multi, gather (on CUDA also copy in) the next bin on a second thread while "
                   "one computes. 'auto' = on for cuda; on the CPU only when the workers leave a core idle (threads x "
                   "local workers < cores): otherwise the thread takes a core from the compute kernels and epochs "
                   "get slower. Mini-batch strategies: a sampler thread prepares up to N steps ahead (sampling, "
                   "feature fetch); auto/on = 2, off = 0 (in the step). Same model either way.")
@click.option("--backward", "backward", type=click.Choice(BACKWARD), default=None,
              help=_for("backward", "auto") + " Backward per bin: recompute the bin's forward (memory bounded by the bin limit) or keep "
                   "every bin's activations from the forward pass (faster, more memory); auto keeps them where "
                   "every layer of a worker is one bin (its whole partition fits), recomputes otherwise.")
@click.option("--micro-batches", type=int, default=None, metavar="N",
              help=_for("micro_batches", "1") + " Split each step's batch into N micro-batches whose gradients "
                   "accumulate into the step's one optimizer update (gradient accumulation: about 1/N of the "
                   "step's blocks and activations alive at once). The loss of each is normalised by the whole "
                   "step's target count and the sampler draws by node, so the model is the same as with N = 1.")
@click.option("--scheduler", type=click.Choice(["on", "off"]), default=None,
              help=_for("scheduler", "on") + " ByteGNN's two-level scheduler: each step's sampling a DAG of chunk "
                   "tasks on a thread pool, launched by Algorithm 1's launch-score; off = one DAG at a time on one "
                   "thread. The same model either way.")
@click.option("--sample-threads", type=int, default=None, metavar="N",
              help=_for("sample_threads", "2") + " Threads of the sampling task pool (besides a launcher and a "
                   "network thread).")
@click.option("--max-dags", type=int, default=None, metavar="N",
              help=_for("max_dags", "4") + " At most N DAGs launched and not yet trained on.")
@click.option("--launch-sigma", type=float, default=None, metavar="SIGMA",
              help=_for("launch_sigma", "500") + " σ of Algorithm 1: launch a DAG when T_gap[ms] x f(C_util) x "
                   "balance >= SIGMA (500: after 5 ms on an idle CPU with balance 1; docs/DESIGN.md).")
@click.option("--task-nodes", type=int, default=None, metavar="N",
              help=_for("task_nodes", "256") + " Frontier nodes per sampling task (a chunk of one owner's nodes).")
@click.option("--heap", type=click.Choice(HEAP_POLICIES), default="keep", show_default=True,
              help="Host memory of each worker process: 'keep' = the C library's malloc serves every block from the "
                   "heap and keeps freed memory there, so each epoch reuses the pages of the last instead of "
                   "mapping, faulting in and zeroing them again (about 20 % faster epochs measured on one worker; the "
                   "resident set stays near its peak); 'system' = the C library's defaults. Linux/glibc only; "
                   "elsewhere both mean the defaults.")
@click.option("--dtype", type=click.Choice(sorted(DTYPES)), default="float32", show_default=True,
              help="Floating-point type of weights and embeddings.")
@click.option("--threads", type=int, default=None, help="Torch threads per worker [default: cores / workers].")
@click.option("--timeout", type=float, default=60.0, show_default=True,
              help="Seconds a worker waits for a peer before the run fails.")
@click.option("--master-addr", default="127.0.0.1", show_default=True,
              help="Rendezvous address for local workers (loopback unless told otherwise).")
@click.option("--master-port", type=int, default=0, show_default=True, help="Rendezvous port (0: a free port).")
@click.option("--emulate-link", default=None, metavar="RATE",
              help="Run the workers on emulated hosts of this machine, joined by links of RATE per host and "
                   "direction (e.g. 100mbit, 1gbit, 10gbit): one network namespace per host with its own cores, "
                   "one torchrun agent per host, each host reading only its own copy of the plan. Needs root (or "
                   "CAP_NET_ADMIN). Results equal a local run's; epoch times include the network's (docs/DESIGN.md, "
                   "'Emulated hosts').")
@click.option("--hosts", type=int, default=None,
              help="With --emulate-link: emulated hosts; each runs K/H workers, which talk over its loopback "
                   "[default: one host per worker].")
@click.option("--emulate-subnet", default=None, metavar="CIDR",
              help="With --emulate-link: the hosts' addresses (host n is address 100+n) [default: 198.18.0.0/24, "
                   "set aside for benchmarking by RFC 2544].")
@click.option("--max-restarts", type=int, default=0, show_default=True,
              help="With --emulate-link: a worker group that lost a worker, or a host whose agent died, is "
                   "restarted up to N times and resumes from the newest checkpoint every host has.")
@click.option("--emulate-fault", "emulate_faults", multiple=True, metavar="SPEC",
              help="With --emulate-link (repeatable): link-down:HOST:EPOCH:SECONDS takes HOST's link down half an "
                   "epoch after epoch EPOCH for SECONDS; kill-agent:HOST:EPOCH kills HOST's torchrun agent then "
                   "(a crashed host, started again under --max-restarts).")
@click.option("-o", "--out", type=OutputPath(), default=None, help="Run folder [default: PLAN.run beside PLAN].")
@click.option("--force", is_flag=True, help="Replace the run folder if it exists.")
def command(plan, epochs, lr, weight_decay, dropout, seed, workers, device, residency, pipeline, trace, profile, count_ops, eval_every,
            checkpoint_every, resume, loggers, metric, no_feature_cache, layer0_cache, prefetch, backward, micro_batches, scheduler,
            sample_threads, max_dags, launch_sigma, task_nodes, heap, dtype, threads, timeout, master_addr, master_port,
            emulate_link, hosts, emulate_subnet, max_restarts, emulate_faults, out, force):
    """Train the plan's GNN with K workers, executed by the plan's strategy (`g3 plan --strategy`: g3's bins
    and peer-to-peer sharing, bns-gcn's or sancus's layer-synchronous exchange, ...); weight gradients are
    all-reduced and every rank takes the same Adam step. Writes RUN/run.json, per-epoch metrics
    (RUN/metrics.jsonl), logs per rank, checkpoints and the final weights RUN/model.pt. Options marked with
    strategies apply only to plans of those strategies (others are refused)."""
    cfg = TrainConfig(epochs=epochs, lr=lr, weight_decay=weight_decay, dropout=dropout, seed=seed, workers=workers,
                      device=device, residency=residency, pipeline=pipeline, trace=trace, profile=profile, count_ops=count_ops, eval_every=eval_every, checkpoint_every=checkpoint_every,
                      resume=resume, logger=tuple(loggers), metric=metric, feature_cache=False if no_feature_cache else None, layer0_cache=layer0_cache, prefetch=prefetch,
                      backward=backward, micro_batches=micro_batches, scheduler=scheduler,
                      sample_threads=sample_threads, max_dags=max_dags, launch_sigma=launch_sigma,
                      task_nodes=task_nodes, heap=heap, dtype=dtype, threads=threads,
                      timeout=timeout, master_addr=master_addr, master_port=master_port,
                      emulate_link=emulate_link, hosts=hosts, emulate_subnet=emulate_subnet,
                      max_restarts=max_restarts, emulate_faults=tuple(emulate_faults))
    try:
        info = run_train(plan, cfg, out=out, force=force)
    except KeyboardInterrupt:
        _say_how_to_resume(plan, out, epochs)
        raise
    print_run_summary(info)


def _say_how_to_resume(plan: str, out: str | None, epochs: int) -> None:
    """After Ctrl-C: the command that continues the run, when it left a checkpoint to continue from."""
    import shlex
    from pathlib import Path

    run = Path(out) if out else Path(plan).parent / f"{Path(plan).name}.run"
    if (run / "checkpoints").is_dir() and any((run / "checkpoints").iterdir()):
        click.echo(f"g3: the run keeps its checkpoints; continue it with: g3 train {shlex.quote(str(plan))} "
                   f"-o {shlex.quote(str(run))} --resume --epochs {epochs}", err=True)
