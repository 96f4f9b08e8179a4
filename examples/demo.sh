#!/usr/bin/env bash
# The README's first command: the whole g3 pipeline on the built-in synthetic graph (no downloads).
# Called by `make demo`; DEMO_DIR, DEMO_PRESET, DEMO_WORKERS and G3 come from the Makefile.
set -euo pipefail
DEMO_DIR=${DEMO_DIR:-demo}
DEMO_PRESET=${DEMO_PRESET:-small}
DEMO_WORKERS=${DEMO_WORKERS:-4}
G3=${G3:-g3}
mkdir -p "$DEMO_DIR"
STORE="$DEMO_DIR/$DEMO_PRESET"

echo "== g3 ingest synthetic:$DEMO_PRESET -> $STORE"
"$G3" ingest "synthetic:$DEMO_PRESET" "$STORE" --force
echo "== g3 info $STORE"
"$G3" info "$STORE"
