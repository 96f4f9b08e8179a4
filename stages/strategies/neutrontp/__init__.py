"""The neutrontp strategy."""
