"""`g3 report`: plots and a summary comparing one or several training runs."""

from stages.report.html import COLUMNS, cell
from stages.report.run import run_report
