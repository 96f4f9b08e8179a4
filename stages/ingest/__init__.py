"""`g3 ingest`: turn OGB folders, WebGraph BV files, edge lists or a synthetic generator into a g3 store."""

from stages.ingest.arrays import source_of
from stages.ingest.run import FORMATS, IngestOptions, SourceArgs, build_store, run_ingest
