"""Run identities: a run's path spells every key that a table's grid may change, so one path is
one run, and a run several tables need is trained once.

results/runs/<dataset>/<variant>/<setting>/seed<seed>, where <setting> is for example
``dirichlet-equal-a0.1-K10-C0.2-E1-R10`` (partition and its alpha or shards, clients,
participation, local epochs, rounds, ``-local`` when clients' local models are evaluated too,
``-stop0.8`` when the run stops once its test accuracy reaches 0.8: a stopped run's best and final
accuracy differ from a full run's, so it is another run).
Everything else in a run's spec is fixed per dataset and variant by the config.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal

import yaml

DIRICHLET = ("dirichlet", "dirichlet-equal")


def num(x) -> str:
    """Canonical text of a number in a path: 1.0 → "1", 0.10 → "0.1", never an exponent, and
    read back as the same float (the shortest digits that do, written out: 1.23456789e-05 →
    "0.0000123456789"; a fixed 15 decimals cut them off and the run trained another alpha)."""
    x = float(x)
    if x.is_integer():
        return str(int(x))
    return format(Decimal(repr(x)), "f")


def partition_part(spec: dict) -> str:
    scheme = spec["partition"]
    if scheme in DIRICHLET:
        return f"{scheme}-a{num(spec['alpha'])}"
    if scheme == "shards":
        return f"{scheme}-s{int(spec['shards'])}"
    return scheme


def setting_id(spec: dict) -> str:
    parts = [
        partition_part(spec),
        f"K{int(spec['clients'])}",
        f"C{num(spec['participation'])}",
        f"E{int(spec['local_epochs'])}",
        f"R{int(spec['rounds'])}",
    ]
    if spec.get("eval_local"):
        parts.append("local")
    if spec.get("stop_at_acc") is not None:
        parts.append(f"stop{num(spec['stop_at_acc'])}")
    return "-".join(parts)


SETTING_RE = re.compile(
    r"(?P<partition>dirichlet-equal|dirichlet|shards|iid)"
    r"(?:-a(?P<alpha>[0-9.]+))?(?:-s(?P<shards>[0-9]+))?"
    r"-K(?P<clients>[0-9]+)-C(?P<participation>[0-9.]+)"
    r"-E(?P<local_epochs>[0-9]+)-R(?P<rounds>[0-9]+)(?P<local>-local)?"
    r"(?:-stop(?P<stop_at_acc>[0-9.]+))?"
)


def parse_setting(text: str) -> dict:
    """The path keys spelled by ``text``; only the canonical spelling is accepted, so one run has
    exactly one path."""
    m = SETTING_RE.fullmatch(text)
    if m is None:
        raise ValueError(
            f"{text!r} is not a run setting like 'dirichlet-equal-a0.1-K10-C0.2-E1-R10'"
        )
    spec = {
        "partition": m["partition"],
        "alpha": float(m["alpha"]) if m["alpha"] else None,
        "shards": int(m["shards"]) if m["shards"] else None,
        "clients": int(m["clients"]),
        "participation": float(m["participation"]),
        "local_epochs": int(m["local_epochs"]),
        "rounds": int(m["rounds"]),
        "eval_local": bool(m["local"]),
    }
    if m["stop_at_acc"]:  # absent otherwise, as in normalise_path_keys
        spec["stop_at_acc"] = float(m["stop_at_acc"])
    needs = "alpha" if spec["partition"] in DIRICHLET else "shards"
    if spec["partition"] != "iid" and spec[needs] is None:
        raise ValueError(f"{text!r}: partition {spec['partition']!r} needs its {needs} in the name")
    if setting_id(spec) != text:
        raise ValueError(f"{text!r} is not canonical; the run's path is {setting_id(spec)!r}")
    return spec


def parse_partition(part: str, clients: str) -> dict:
    return parse_setting(f"{part}-K{clients}-C1-E1-R1")


def partition_file(dataset: str, spec: dict, seed) -> str:
    part = f"{partition_part(spec)}-K{int(spec['clients'])}"
    return f"results/partitions/{dataset}/{part}/seed{int(seed)}.parquet"


def normalise_path_keys(spec: dict) -> dict:
    """Drop the partition parameter the scheme does not use, so it cannot split identical runs."""
    spec = dict(spec)
    if spec["partition"] not in DIRICHLET:
        spec["alpha"] = None
    if spec["partition"] != "shards":
        spec["shards"] = None
    spec["eval_local"] = bool(spec.get("eval_local", False))
    # absent unless set, so runs without it keep their flags (and are not re-run)
    if spec.get("stop_at_acc") is None:
        spec.pop("stop_at_acc", None)
    return spec


def run_dir(spec: dict, variant: str, seed) -> str:
    return f"results/runs/{spec['dataset']}/{variant}/{setting_id(spec)}/seed{int(seed)}"


RUN_DIR_RE = re.compile(
    r"results/runs/(?P<dataset>[^/]+)/(?P<variant>[^/]+)/(?P<setting>[^/]+)/seed(?P<seed>[0-9]+)"
)


def parse_run_dir(run: str) -> dict[str, str]:
    """The dataset, variant, setting and seed that ``run_dir`` spelled into ``run`` (the train
    rule's wildcards); ValueError for another path."""
    m = RUN_DIR_RE.fullmatch(run)
    if m is None:
        raise ValueError(f"run directory {run!r} is not results/runs/DATASET/VARIANT/SETTING/seedN")
    return m.groupdict()


def run_files(run: str) -> list[str]:
    return [f"{run}/run.json", f"{run}/metrics.parquet"]


PLAIN_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_./+-]*")
YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}


def cli_value(value) -> str:
    """A flag value that `fedkd train` reads back unchanged (it reads values as YAML 1.2,
    fedkd.values; floats keep a decimal point, so a YAML 1.1 reader, where "1e-05" is text,
    reads them as floats too)."""
    if isinstance(value, str):
        plain = PLAIN_WORD.fullmatch(value) and value.lower() not in YAML_WORDS
        return value if plain else json.dumps(value)
    if isinstance(value, float):
        mantissa, _, exponent = repr(value).partition("e")
        if exponent and "." not in mantissa:
            mantissa += ".0"
        return f"{mantissa}e{exponent}" if exponent else mantissa
    if isinstance(value, (dict, list)):
        return _flow_yaml(value)
    return json.dumps(value)  # int, bool, None


# a mapping or list in YAML's flow style, by its repr (which tells 1 from 1.0 and "1" from 1):
# every run of a variant passes the same params and options, and YAML's writer took a
# millisecond a run, most of fedkd's planning of 100,000 runs
_FLOW_YAML: dict[str, str] = {}


def _flow_yaml(value) -> str:
    key = repr(value)
    text = _FLOW_YAML.get(key)
    if text is None:
        if len(_FLOW_YAML) > 4096:
            _FLOW_YAML.clear()
        text = yaml.safe_dump(value, default_flow_style=True, width=10**6, sort_keys=True).strip()
        _FLOW_YAML[key] = text
    return text
