"""Reports: text summaries, tables and plots of schedules and budget sweeps.

Submodules are imported on demand (plots need matplotlib):
``poet.report.text`` (one schedule as text), ``poet.report.tables``
(markdown/CSV tables), ``poet.report.plots`` (PNG + SVG figures),
``poet.report.study`` (the picture of a study).  The ``poet report`` and ``poet sweep`` commands
are ``poet.cli.report`` and ``poet.cli.sweep``.
"""
