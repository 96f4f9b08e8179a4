"""Where a run's epoch figures go besides RUN/metrics.jsonl (the source of truth, always written): the logging
tools people already read (`g3 train --logger csv|tensorboard`). Each logger takes rank 0's epoch records as
MetricsWriter writes them; a resumed run drops what followed the epoch it resumes at, as metrics.jsonl does."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

from stages.common.errors import G3InputError

LOGGERS = ("csv", "tensorboard")
# the scalar figures of an epoch record, in the order the CSV's columns take (those a run has)
SCALARS = (
    "loss",
    "epoch_seconds",
    "train_acc",
    "valid_acc",
    "test_acc",
    "train_rocauc",
    "valid_rocauc",
    "test_rocauc",
    "bytes_sent",
    "link_bytes_sent",
    "comm_hidden_share",
)


def check_loggers(names) -> None:
    """Unknown loggers, and TensorBoard without its package: one line, before any worker starts."""
    for name in names:
        if name not in LOGGERS:
            raise G3InputError(f"--logger {name} is not one of {', '.join(LOGGERS)}")
    if "tensorboard" in names and importlib.util.find_spec("tensorboard") is None:
        raise G3InputError(
            "--logger tensorboard needs the tensorboard package: pip install 'g3[tensorboard]'"
        )


class CsvLogger:
    """RUN/metrics.csv: a row per epoch (``epoch`` and the run's scalar figures), rewritten from metrics.jsonl
    after every epoch so that it always matches it (a resumed run's included)."""

    def __init__(self, run_dir: Path, start: int):
        self.jsonl, self.path = Path(run_dir) / "metrics.jsonl", Path(run_dir) / "metrics.csv"

    def epoch(self, record: dict) -> None:
        from stages.common.atomic import atomic_file

        records = [json.loads(line) for line in self.jsonl.read_text().splitlines() if line.strip()]
        columns = ["epoch"] + [k for k in SCALARS if any(r.get(k) is not None for r in records)]
        with atomic_file(self.path) as tmp, open(tmp, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(columns)
            for r in records:
                writer.writerow(["" if r.get(k) is None else r[k] for k in columns])

    def close(self) -> None:
        pass


class TensorBoardLogger:
    """RUN/tensorboard/: TensorBoard event files, one scalar per figure and epoch (``loss``, ``accuracy/test``,
    ``time/epoch_seconds``, …); a resumed run purges the steps from the epoch it resumes at."""

    TAGS = {
        "loss": "loss",
        "epoch_seconds": "time/epoch_seconds",
        "bytes_sent": "network/bytes_sent",
        "link_bytes_sent": "network/link_bytes_sent",
        "comm_hidden_share": "network/comm_hidden_share",
    }

    def __init__(self, run_dir: Path, start: int):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(Path(run_dir) / "tensorboard"), purge_step=start)

    def epoch(self, record: dict) -> None:
        for key in SCALARS:
            value = record.get(key)
            if value is None:
                continue
            split, _, metric = key.partition("_")
            tag = self.TAGS.get(key) or f"{'accuracy' if metric == 'acc' else metric}/{split}"
            self.writer.add_scalar(tag, float(value), int(record["epoch"]))
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def make_loggers(names, run_dir: Path, start: int) -> list:
    return [{"csv": CsvLogger, "tensorboard": TensorBoardLogger}[name](run_dir, start) for name in names]
