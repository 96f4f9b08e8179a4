"""The ranked table of `g3 advise` (presentation only)."""

from __future__ import annotations

from stages.common.units import human_bytes


def _to_target(e: dict) -> str:
    """Time to the target and the epochs it takes (the convergence model's)."""
    if e.get("time_to_target_seconds") is None:
        return "-"
    epochs = e.get("epochs_to_target")
    return _seconds(e["time_to_target_seconds"]) + (f" ({epochs} ep)" if epochs is not None else "")


def _seconds(x: float | None) -> str:
    if x is None:
        return "-"
    if x < 1:
        return f"{x * 1e3:.1f} ms"
    if x < 600:
        return f"{x:.2f} s"
    return f"{x / 60:.1f} min"


def print_advice(result: dict, console=None, top: int | None = None) -> None:
    """The ranking, best first (``top``: only the first rows), then how it was predicted."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    store, model = result["store"], result["model"]
    cluster = result.get("cluster")
    if cluster:  # a cluster of unlike hosts: its host kinds, K, and the memory every plan is sized for
        where = (
            f"cluster {cluster['description']}; workers {cluster['workers']}; plans sized for the smallest "
            f"device memory, {human_bytes(result['device_memory_bytes'])}"
        )
    else:
        where = (
            f"workers {', '.join(map(str, result['workers']))}; links {', '.join(result['links'])}; "
            f"device memory {human_bytes(result['device_memory_bytes'])}"
        )
    console.print(
        f"[bold]g3 advise[/bold] {store['name']} ({store['num_nodes']:,} nodes, {store['num_arcs']:,} arcs), "
        f"{model['model']} L={model['layers']} H={model['hidden']}; {where}"
    )
    t = Table(title="ranking (best first)", expand=False)
    for c, kw in (
        ("#", {"justify": "right"}),
        ("strategy", {"overflow": "fold"}),
        ("variant", {"overflow": "fold"}),
        ("K", {"justify": "right"}),
        ("cluster" if result.get("cluster") else "link", {}),
        ("epoch", {"justify": "right"}),
        ("to target", {"justify": "right"}),
        ("sent / epoch", {"justify": "right"}),
        ("peak / worker", {"justify": "right"}),
        ("fits", {}),
        ("why this place", {"overflow": "fold", "ratio": 1, "min_width": 24}),
    ):
        t.add_column(c, **kw)
    rows = result["ranking"][:top] if top else result["ranking"]
    for e in rows:
        t.add_row(
            str(e["rank"]),
            e["strategy"],
            e["variant"],
            str(e["workers"]),
            e["link"],
            _seconds(e["predicted_epoch_seconds"]),
            _to_target(e),
            "-" if e["bytes_per_epoch"] is None else human_bytes(e["bytes_per_epoch"]),
            "-" if e["peak_memory_bytes"] is None else human_bytes(e["peak_memory_bytes"]),
            {True: "yes", False: "no", None: "-"}[e["fits"]],
            e["reason"] or "",
        )
    console.print(t)
    if top and len(result["ranking"]) > top:
        console.print(f"({len(result['ranking']) - top} more in advise.json)")
    cal = result["calibration"]
    prof = cal.get("profile") or {}
    console.print(
        f"calibrated on this machine at K0 = {cal['calibration_workers']}: profile {prof.get('status', '-')}; "
        f"{sum(r['status'] == 'ok' for r in cal['runs'])}/{len(cal['runs'])} runs of their own plans "
        "(sampling models, fitted speeds); "
        f"{cal['spent_seconds']:.1f} s of the {cal['budget_seconds']:g} s budget; "
        f"{len(result['cache']['reused'])} cached artifacts reused"
    )
    ttt = result["time_to_target"]
    console.print(
        f"to target: exact full-graph training taken to need {ttt['epochs']} epochs; "
        f"convergence model '{ttt['model']}': {ttt['note']}"
    )
    console.print(f"wrote {result['path']}/advise.json ({result['seconds']:.1f} s)")
