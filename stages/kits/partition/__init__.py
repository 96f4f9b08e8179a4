"""The partition machinery every method shares: the graphs a method reads, METIS (with coarsening), the
baseline methods, the shard layouts and the figures of a partition."""
