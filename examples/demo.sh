#!/usr/bin/env bash
# The README's first command: the whole g3 pipeline on the built-in synthetic graph (no downloads).
# Called by `make demo`; DEMO_DIR, DEMO_PRESET, DEMO_WORKERS, DEMO_EPOCHS and G3 may be overridden.
set -euo pipefail
DEMO_DIR=${DEMO_DIR:-demo}
DEMO_PRESET=${DEMO_PRESET:-small}
DEMO_WORKERS=${DEMO_WORKERS:-4}
DEMO_EPOCHS=${DEMO_EPOCHS:-60}
G3=${G3:-g3}
mkdir -p "$DEMO_DIR"
STORE="$DEMO_DIR/$DEMO_PRESET"
PART="$STORE.part-g3-$DEMO_WORKERS"
PLAN="$PART.plan-sage"
RUN="$PLAN.run"

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "1/4 g3 ingest synthetic:$DEMO_PRESET $STORE"
"$G3" ingest "synthetic:$DEMO_PRESET" "$STORE" --force
"$G3" info "$STORE"

step "2/4 g3 partition $STORE --workers $DEMO_WORKERS (multi-constraint METIS + G3 rebalancing)"
"$G3" partition "$STORE" --workers "$DEMO_WORKERS" -o "$PART" --force

step "3/4 g3 plan $PART (GraphSAGE, 2 layers, hidden 16, bins of 5000 nodes)"
"$G3" plan "$PART" --model sage --layers 2 --hidden 16 --bin-size 5000 -o "$PLAN" --force

step "4/4 g3 train $PLAN --workers $DEMO_WORKERS --epochs $DEMO_EPOCHS"
"$G3" train "$PLAN" --workers "$DEMO_WORKERS" --epochs "$DEMO_EPOCHS" --lr 0.02 --dropout 0.3 --eval-every 5 \
  -o "$RUN" --force

echo
echo "demo done: store $STORE, partition $PART, plan $PLAN, run $RUN (metrics: $RUN/metrics.jsonl)"
