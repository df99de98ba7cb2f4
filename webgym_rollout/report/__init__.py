"""Reports: what a person reads about runs.

`rates` computes success rates with confidence intervals and compares two runs; `charts` draws the
report's inline SVG charts and the learning curve (SVG and PNG); `html` builds and writes the
evaluation report (``webgym-rollout report``); `viewer` a static page per trajectory dataset
(``webgym-rollout view``). May import `webgym_core`, `webgym_data`, `webgym_rollout.agent` and
`webgym_rollout.trajectory`; never a browser or a judge.

The names of `html` are re-exported here, so imports written for the former module
`webgym_rollout.report` keep working.
"""

from webgym_rollout.report.html import (
    Group,
    JudgeAgreement,
    PairedComparison,
    Report,
    ReportCommandSettings,
    ReportSettings,
    RunSummary,
    SuccessRate,
    TaskDiff,
    build_report,
    format_summary,
    report_command,
    write_report,
)

__all__ = [
    "Group",
    "JudgeAgreement",
    "PairedComparison",
    "Report",
    "ReportCommandSettings",
    "ReportSettings",
    "RunSummary",
    "SuccessRate",
    "TaskDiff",
    "build_report",
    "format_summary",
    "report_command",
    "write_report",
]
