"""Where published code bases disagree on a detail their papers leave open, a strategy parameter
selects each behaviour (the strategy's module says which code does what). This module holds the
defaults, without importing torch, so that a caption can name a run's choice where it departs
from the default (fedkd.report.setting) without loading the strategies.

Default: the paper where it decides, otherwise the code the paper's numbers came from.
"""

from __future__ import annotations

import json
from typing import Any

from fedkd.values import load_json

# strategy → {parameter: default}
DEFAULTS: dict[str, dict[str, Any]] = {
    # MOON's negative on a client's first participation: the FedGKD paper's MOON numbers came
    # from its own code (CGCL-codes/FedGKD), which has none there (fedkd.strategies.moon)
    "moon": {"first_negative": "none"},
    # FedNTD's tau^2 factor on the not-true KL: the paper's equation has none
    # (fedkd.strategies.fedntd)
    "fedntd": {"tau_squared": False},
    # FedGKD's teacher at M = 1: the paper's received global model; the released worker code
    # keeps the initial one (fedkd.strategies.fedgkd)
    "fedgkd": {"m1_teacher": "current"},
    "fedgkd+": {"m1_teacher": "current"},
    # FedDistill+'s target: FedGen's code distils toward the global per-label logits; the FedGKD
    # repository's release toward uniform outputs (fedkd.strategies.feddistill_plus)
    "feddistill+": {"target": "global"},
}


def departures(strategy: str, params: dict[str, Any] | str | None) -> list[str]:
    """``"key value"`` for each choice of ``strategy`` that ``params`` (the resolved parameters,
    or their JSON) sets to other than the default, e.g. ``["first_negative own-init"]``."""
    if isinstance(params, str):
        try:
            params = load_json(params, "the parameters") if params else {}
        except ValueError:  # not JSON, or nested too deep to be parameters
            return []
    if not isinstance(params, dict):
        return []
    out = []
    for key, default in DEFAULTS.get(strategy, {}).items():
        if key in params and params[key] != default:
            value = params[key]
            out.append(f"{key} {json.dumps(value) if isinstance(value, bool) else value}")
    return out
