"""`g3 advise STORE`: which strategy, and how many workers, for this graph, model and cluster — predicted,
explained, ranked (:mod:`.run`)."""

from stages.advise.options import (
    ADVISE_SCHEMA,
    ADVISE_VERSION,
    AUTO_CALIBRATE_LINK,
    AdviseOptions,
    parse_links,
    parse_strategies,
    parse_workers,
    resolve_calibrate_link,
)
from stages.advise.predict import epochs_to_target, train_command, worker_memory
from stages.advise.report import print_advice
from stages.advise.run import run_advise
