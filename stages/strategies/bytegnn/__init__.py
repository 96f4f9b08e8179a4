"""The bytegnn strategy."""
