"""The sancus strategy."""
