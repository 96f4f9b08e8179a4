"""`g3 partition`: split a store's nodes over K workers and write one self-contained shard per worker."""

from stages.partition.report import print_partition_summary
from stages.partition.run import (
    DEFAULT_METHOD,
    PARTITION_SCHEMA,
    PARTITION_VERSION,
    PartitionOptions,
    default_output,
    run_partition,
)
