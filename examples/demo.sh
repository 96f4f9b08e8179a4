#!/usr/bin/env bash
# The README's first command: the whole g3 pipeline on the built-in synthetic graph (no downloads).
# Called by `make demo`; DEMO_DIR, DEMO_PRESET, DEMO_WORKERS, DEMO_EPOCHS, DEMO_PIPELINE (g3 train --pipeline;
# default: g3 train's), G3 and PYTHON may be overridden.
set -euo pipefail
DEMO_DIR=${DEMO_DIR:-demo}
DEMO_PRESET=${DEMO_PRESET:-small}
DEMO_WORKERS=${DEMO_WORKERS:-4}
DEMO_EPOCHS=${DEMO_EPOCHS:-60}
G3=${G3:-g3}
DEMO_PIPELINE=${DEMO_PIPELINE:-}
PYTHON=${PYTHON:-python3}
mkdir -p "$DEMO_DIR"
STORE="$DEMO_DIR/$DEMO_PRESET"
PART="$STORE.part-g3-$DEMO_WORKERS"
PLAN="$PART.plan-sage"
RUN="$PLAN.run"

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "1/6 g3 ingest synthetic:$DEMO_PRESET $STORE"
"$G3" ingest "synthetic:$DEMO_PRESET" "$STORE" --force
"$G3" info "$STORE"

step "2/6 g3 partition $STORE --workers $DEMO_WORKERS (multi-constraint METIS + G3 rebalancing)"
"$G3" partition "$STORE" --workers "$DEMO_WORKERS" -o "$PART" --force

step "3/6 g3 plan $PART (GraphSAGE, 2 layers, hidden 16, bins of 5000 nodes)"
"$G3" plan "$PART" --model sage --layers 2 --hidden 16 --bin-size 5000 -o "$PLAN" --force

step "4/6 g3 train $PLAN --workers $DEMO_WORKERS --epochs $DEMO_EPOCHS"
"$G3" train "$PLAN" --workers "$DEMO_WORKERS" --epochs "$DEMO_EPOCHS" --lr 0.02 --dropout 0.3 --eval-every 5 \
  ${DEMO_PIPELINE:+--pipeline "$DEMO_PIPELINE"} -o "$RUN" --force

step "5/6 g3 eval $RUN (accuracy of the final weights on every split)"
"$G3" eval "$RUN"

step "6/6 g3 report $RUN (plots, summary table, HTML page)"
"$G3" report "$RUN" -o "$RUN/report"

echo
"$PYTHON" - "$RUN/report/summary.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
s = r["runs"][0]
acc = s["eval_test_acc"] if s["eval_test_acc"] is not None else s["final_test_acc"]
print(f"final test accuracy: {100 * acc:.2f} %" if acc is not None else "final test accuracy: n/a")
tp = s["throughput_nodes_per_second"]
print(f"throughput: {tp:,.0f} nodes/s (median epoch {s['median_epoch_seconds']:.3f} s, {s['workers']} workers)"
      if tp else "throughput: n/a")
print(f"plots: {r['out']}/ ({', '.join(p['file'] for p in r['plots'])}); open {r['index']}")
PY
echo "demo done: store $STORE, partition $PART, plan $PLAN, run $RUN (metrics: $RUN/metrics.jsonl)"
