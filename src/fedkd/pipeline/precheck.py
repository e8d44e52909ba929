"""``python -m fedkd.pipeline.precheck [SNAKEMAKE ARGUMENTS]``: Snakemake, with the configuration
files it will read checked first: those of its command line, or, when it names none, the
workflow's default ``config/config.yaml`` (under ``--directory``, where Snakemake looks for it).

Snakemake reads every configuration file with its own YAML reader before the workflow's check can
run: a 50 MB file kept it busy for more than 8 minutes, and a deeply nested one can exhaust its
recursion. This wrapper applies the workflow's own bounds (a regular file of at most 1 MiB, no
alias bomb, no deep nesting: fedkd.pipeline.config_file.read_config_file) in about a second,
refuses a file outside them with one line naming it, and otherwise runs
``python -m snakemake`` with the same arguments in its place."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from fedkd.pipeline.config_file import ConfigError, read_config_file

# what the Snakefile reads when no --configfile is given, relative to Snakemake's working
# directory (--directory, else the current one)
DEFAULT_CONFIG = Path("config") / "config.yaml"


def config_files(argv: list[str]) -> list[str]:
    """The configuration files Snakemake will read for this command line, read by Snakemake's own
    parser (``--configfile``/``--configfiles``, abbreviations included); when it names none, the
    workflow's default configuration, if it exists under the working directory."""
    import contextlib
    import io

    from snakemake.cli import get_argument_parser

    # --help, --version and a bad command line are Snakemake's to print, once
    quiet = io.StringIO()
    try:
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            args, _ = get_argument_parser().parse_known_args(argv)
    except SystemExit:
        return []
    given = [str(f) for f in (getattr(args, "configfile", None) or [])]
    if given:
        return given
    default = Path(getattr(args, "directory", None) or ".") / DEFAULT_CONFIG
    # one that is missing is Snakemake's to name (the Snakefile asks for it)
    return [str(default)] if default.exists() else []


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    for path in config_files(argv):
        try:
            read_config_file(path)
        except ConfigError as exc:
            print(f"fedkd: {exc}", file=sys.stderr)
            return 1
    os.execv(sys.executable, [sys.executable, "-m", "snakemake", *argv])
    return 0  # not reached: Snakemake replaced this process


if __name__ == "__main__":
    sys.exit(main())
