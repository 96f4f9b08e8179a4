"""The bns_gcn strategy."""
