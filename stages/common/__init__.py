"""Pieces every stage shares: errors, atomic artifact output, progress display, the graph store reader."""
