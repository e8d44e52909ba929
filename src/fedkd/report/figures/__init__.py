"""Figures, one module each with ``build(source, options) -> Figure``, drawn with matplotlib's
object API on the Agg canvas (no pyplot state); the registry of figure kinds is
fedkd.report.targets."""
