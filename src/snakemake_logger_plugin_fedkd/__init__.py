"""fedkd's console as a Snakemake logger plugin: ``snakemake --logger fedkd`` (the workflow's
default profile sets it). The handler lives in fedkd.pipeline.console."""

from fedkd.pipeline.console import ConsoleHandler as LogHandler

__all__ = ["LogHandler"]
