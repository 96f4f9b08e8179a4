"""The p3 strategy."""
