"""The distdgl strategy."""
