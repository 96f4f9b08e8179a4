"""DIR/index.html of `g3 report`: one self-contained page (inline CSS, no scripts) with the summary table and
relative links to the PNGs beside it, so the folder can be copied or served as it is."""

from __future__ import annotations

import html
import time
from pathlib import Path

from stages.common.units import human_bytes
from stages.strategies.registry import LEGACY_STRATEGY

COLUMNS = (  # summary key, header, formatter
    ("label", "run", str),
    ("strategy", "strategy", str),
    ("workers", "workers", str),
    ("epochs", "epochs", str),
    ("median_epoch_seconds", "median epoch", lambda v: f"{v:.3f} s"),
    ("throughput_nodes_per_second", "throughput (nodes/s)", lambda v: f"{v:,.0f}"),
    ("final_valid_acc", "valid acc (final)", lambda v: f"{100 * v:.2f} %"),
    ("best_valid_acc", "valid acc (best)", lambda v: f"{100 * v:.2f} %"),
    ("final_test_acc", "test acc (final)", lambda v: f"{100 * v:.2f} %"),
    ("best_test_acc", "test acc (best)", lambda v: f"{100 * v:.2f} %"),
    ("eval_test_acc", "test acc (g3 eval)", lambda v: f"{100 * v:.2f} %"),
    ("bytes_sent_per_epoch", "sent / epoch", human_bytes),
    ("comm_hidden_share", "comm hidden (traced)", lambda v: f"{100 * v:.0f} %"),
    ("comm_waited_share", "comm blocked (traced)", lambda v: f"{100 * v:.0f} %"),
)

CSS = """
body { font-family: system-ui, -apple-system, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: right; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
figure { margin: 1em 0; } figcaption { color: #555; font-size: 0.9em; }
img { max-width: 100%; border: 1px solid #eee; }
.notes { color: #8a5a00; } code { background: #f5f5f5; padding: 0 3px; }
"""


def cell(summary: dict, key: str, fmt) -> str:
    v = summary.get(key)
    return "–" if v is None else fmt(v)


def write_index(
    out: Path,
    summaries: list[dict],
    sections: list[tuple[str, list[dict]]],
    notes: list[str],
    definitions: list[str],
) -> Path:
    """Write OUT/index.html; ``sections`` are (heading, [{"file", "caption"}]) with files relative to OUT."""
    e = html.escape
    columns = [c for c in COLUMNS if c[0] == "label" or any(s.get(c[0]) is not None for s in summaries)]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>g3 report: {e(', '.join(s['label'] for s in summaries))}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>g3 report — {len(summaries)} run{'s' if len(summaries) != 1 else ''}</h1>",
        f"<p>Generated {e(time.strftime('%Y-%m-%d %H:%M:%S'))} by <code>g3 report</code>.</p>",
        "<h2>Summary</h2>",
        "<table><tr>" + "".join(f"<th>{e(h)}</th>" for _, h, _ in columns) + "</tr>",
    ]
    for s in summaries:
        parts.append("<tr>" + "".join(f"<td>{e(cell(s, k, f))}</td>" for k, _, f in columns) + "</tr>")
    parts.append("</table>")
    parts.append(
        "<ul>"
        + "".join(
            f"<li>{e(s['label'])}: <code>{e(s['path'])}</code> — {e(s['graph'])}, "
            f"strategy {e(s.get('strategy', LEGACY_STRATEGY))}, {e(s['model'])}, partition {e(s['partition'])}, "
            f"pipeline {e(s['pipeline'])}, "
            f"status {e(str(s['status']))}</li>"
            for s in summaries
        )
        + "</ul>"
    )
    parts.append("<ul>" + "".join(f"<li>{e(d)}</li>" for d in definitions) + "</ul>")
    if notes:
        parts.append('<ul class="notes">' + "".join(f"<li>{e(n)}</li>" for n in notes) + "</ul>")
    for heading, figures in sections:
        if not figures:
            continue
        parts.append(f"<h2>{e(heading)}</h2>")
        for fig in figures:
            parts.append(
                f'<figure><img src="{e(fig["file"], quote=True)}" alt="{e(fig["caption"], quote=True)}">'
                f"<figcaption>{e(fig['caption'])}</figcaption></figure>"
            )
    parts.append("</body></html>")
    path = out / "index.html"
    path.write_text("\n".join(parts) + "\n")
    return path
