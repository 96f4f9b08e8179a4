"""The hopgnn strategy."""
