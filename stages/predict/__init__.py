"""`g3 predict` and `g3 export`: a trained run's model over a whole graph in one process (:mod:`.run`)."""

from stages.predict.run import (
    ExportOptions,
    PredictOptions,
    WholeGraphModel,
    load_whole_graph_model,
    predict_logits,
    run_export,
    run_predict,
    run_store_path,
)
