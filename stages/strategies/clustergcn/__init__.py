"""The clustergcn strategy."""
