"""Reports: text summaries, tables and plots of schedules and budget sweeps.

Submodules are imported on demand (plots need matplotlib):
``poet.report.text`` (one schedule as text), ``poet.report.tables``
(markdown/CSV tables), ``poet.report.plots`` (PNG + SVG figures) and
``poet.report.commands`` (the ``poet sweep`` and ``poet report`` subcommands).
"""
