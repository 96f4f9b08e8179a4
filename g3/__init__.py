"""g3 from Python: the pipeline's stages behind a few functions, on the same artifacts as the CLI.

    import g3

    store = g3.ingest(data, "work/cora.g3")                  # a path, a PyG Data, a scipy matrix or arrays
    part = g3.partition(store, workers=2, out="work/cora.part")
    plan = g3.plan(part, strategy="g3", model="sage", hidden=64, out="work/cora.plan")
    run = g3.train(plan, epochs=50, lr=0.01, out="work/cora.run")
    print(run.test_acc, run.metrics[-1]["epoch_seconds"])
    acc = g3.evaluate(run)["accuracy"]                       # exact full-graph inference, as `g3 eval`
    model = g3.load_model(run)                               # a torch.nn.Module over a whole graph
    logits = g3.predict(run)                                 # [N, C], node-id order
    best = g3.advise(store, workers=(2, 4), link="1gbit")["ranking"][0]   # which strategy and K

Each function checks its input as the matching `g3` command does and raises :class:`G3InputError` (bad input:
its message names the file and what is wrong) or :class:`G3RuntimeError`; nothing is half-written, and an
existing artifact is replaced only with ``force=True``. Importing g3 imports nothing heavy and changes nothing
outside g3 (no global torch or numba setting).
"""

from __future__ import annotations

# the public names (api.__all__): the stages as functions, the run and the model they return, the two errors
from g3.api import *  # noqa: F403
from g3.api import __all__  # noqa: F401


def __getattr__(name: str):
    if name == "WholeGraphModel":  # what g3.load_model returns, imported when named
        from g3.api import __getattr__ as api_attribute

        return api_attribute(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
