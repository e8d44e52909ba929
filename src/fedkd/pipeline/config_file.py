"""The workflow's configuration files read as fedkd reads every value (YAML 1.2, fedkd.values),
within a size bound, merged as Snakemake merges them."""

from __future__ import annotations

import json
from pathlib import Path

from fedkd.echo import safe_message


class ConfigError(Exception):
    """A configuration refused; its message is made safe to print (fedkd.echo.safe_message: no
    escape sequence or bidi override of a key or value reaches the terminal, no line is endless)."""

    def __init__(self, message: object = "") -> None:
        super().__init__(safe_message(message))


# a workflow configuration is a few tens of kilobytes (config/paper.yaml: 17 KB); a larger file
# is a mistake (a results file, /dev/zero)
MAX_CONFIG_BYTES = 1 << 20


def read_config_file(path, where: str | None = None) -> dict | None:
    """One configuration file as fedkd reads every value (YAML 1.2, fedkd.values: ``010`` is 10,
    ``1:30`` and ``yes`` are text that a number or true/false key refuses), where Snakemake's own
    loader reads YAML 1.1 (``010`` is 8, ``1:30`` 90, ``yes`` true): JSON first, as Snakemake
    reads it, then YAML, within fedkd.values' bounds (no alias bomb, no deep nesting). It must be
    a regular file (a FIFO or a device is refused without reading it) of at most
    MAX_CONFIG_BYTES holding a mapping; an empty file is None. Every problem is a one-line
    ConfigError naming ``where`` (default: "configuration file PATH")."""
    import stat

    from fedkd.values import load_json, load_yaml

    path = Path(path)
    where = where or f"configuration file {path}"
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            raise ConfigError(f"{where} is not a regular file; give the YAML file itself")
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read {where}: {exc.strerror}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"{where} is larger than {MAX_CONFIG_BYTES:,} bytes, far more than a configuration "
            "holds; give the workflow's YAML configuration"
        )
    try:
        text = raw.decode("utf-8")
        try:
            data = load_json(text, where)
        except json.JSONDecodeError:
            data = load_yaml(text, where)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except ValueError as exc:  # not YAML, nested too deep, or aliases expanding too far
        raise ConfigError(str(exc) if str(exc).startswith(where) else f"{where}: {exc}") from None
    if data is None:
        return None
    if not isinstance(data, dict):
        raise ConfigError(f"{where} does not hold a mapping of keys to values")
    if "__use_yte__" in data:
        raise ConfigError(
            f"{where} uses yte templates (__use_yte__), which fedkd does not read; write its "
            "values out"
        )
    return data


def read_config_files(paths, overrides=None) -> dict:
    """The workflow's configuration as fedkd reads it (read_config_file): ``paths`` merged in
    order as Snakemake merges them, then ``overrides`` (its ``--config`` values) over them."""
    merged: dict = {}
    for path in paths:
        data = read_config_file(path)
        if data is not None:
            _merge(merged, data)
    _merge(merged, json.loads(json.dumps(dict(overrides or {}), default=str)))
    return merged


def _merge(into: dict, over: dict) -> None:
    """Snakemake's update_config: mappings merged key by key, any other value replaced."""
    for key, value in over.items():
        if isinstance(value, dict):
            sub = into.get(key)
            if not isinstance(sub, dict):
                sub = into[key] = {}
            _merge(sub, value)
        else:
            into[key] = value


def reread_config(config: dict, paths, overrides=None) -> None:
    """``config`` (Snakemake's, read with its YAML 1.1 loader) replaced in place by
    ``read_config_files(paths, overrides)``, so that every value of the workflow is read as
    ``fedkd train`` reads it."""
    fresh = read_config_files(paths, overrides)
    config.clear()
    config.update(fresh)
