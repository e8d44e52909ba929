"""``python -m fedkd.pipeline.precheck [SNAKEMAKE ARGUMENTS]``: Snakemake, with the configuration
files of its command line checked first.

Snakemake reads every ``--configfile`` with its own YAML reader before the workflow's check can
run: a 50 MB file kept it busy for more than 8 minutes, and a deeply nested one can exhaust its
recursion. This wrapper applies the workflow's own bounds (a regular file of at most 1 MiB, no
alias bomb, no deep nesting: fedkd.pipeline.config_file.read_config_file) in about a second,
refuses a file outside them with one line naming it, and otherwise runs
``python -m snakemake`` with the same arguments in its place."""

from __future__ import annotations

import os
import sys

from fedkd.pipeline.config_file import ConfigError, read_config_file


def config_files(argv: list[str]) -> list[str]:
    """The configuration files named on a Snakemake command line, read by Snakemake's own parser
    (``--configfile``/``--configfiles``, abbreviations included)."""
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
    return [str(f) for f in (getattr(args, "configfile", None) or [])]


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
