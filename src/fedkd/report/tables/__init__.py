"""Table layouts, one module each with ``build(source, options) -> TableDoc``; the registry of
layouts is fedkd.report.targets."""
