"""`g3 report`: plots and a summary comparing one or several training runs."""

from stages.report.run import COLUMNS, RunData, cell, default_out, load_run, run_report

__all__ = ["COLUMNS", "RunData", "cell", "default_out", "load_run", "run_report"]
