"""`g3 eval`: exact full-neighbour inference of a run's weights (:mod:`.run`); `g3 predict` and `g3 export`: the
run's model over a whole graph in one process (:mod:`.whole_graph`)."""

from stages.eval.run import EvalOptions, ExportOptions, PredictOptions, run_eval, run_plan_path
from stages.eval.whole_graph import (
    WholeGraphModel,
    load_whole_graph_model,
    predict_logits,
    run_export,
    run_predict,
    run_store_path,
)

__all__ = [
    "EvalOptions",
    "ExportOptions",
    "PredictOptions",
    "WholeGraphModel",
    "load_whole_graph_model",
    "predict_logits",
    "run_eval",
    "run_export",
    "run_plan_path",
    "run_predict",
    "run_store_path",
]
