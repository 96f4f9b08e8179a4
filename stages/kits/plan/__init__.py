"""The plan kit: what strategies' planners share (the plan context, bins, peer-to-peer tables, the boundary
exchange of layer-synchronous strategies, residency)."""
