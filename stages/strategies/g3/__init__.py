"""The g3 strategy."""
