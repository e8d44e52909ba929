"""Run-level choices the papers leave open, where the FedGKD authors' released code
(CGCL-codes/FedGKD, built on FedDF's code) decides: they apply to every strategy, so they are run
spec keys (``RunSpec``), recorded in run.json and named in a caption when a run departs from the
default (fedkd.report.setting). No torch here: the report reads it without loading the models.

- ``classifier_init``: "pytorch" (default) keeps ``nn.Linear``'s own initialisation of the
  classifier, as the release does (its ``normal_(0, 0.01)`` line is commented out, resnet.py
  lines 180-182); "normal" draws the weights from N(0, 0.01) with zero bias, which fedkd did on
  its ResNets before this choice existed. The CNN and DistilBERT always had the default.
- ``weight_decay_exempt``: "block-norms" (default) exempts from weight decay what the release
  exempts (create_optimizer.py line 12: every parameter whose name holds "bn"): the affine
  parameters of the ResNets' stem norm and of the residual blocks' norms, not those of the
  shortcut norms (the release's ``downsample.1``). fedkd's CNN has no norm layer and the
  release names no DistilBERT parameter "bn" (its LayerNorms are decayed), so on those models
  nothing is exempt. "none" decays every parameter, as fedkd did before.
- ``bn_running_stats``: "average" (default) averages BatchNorm's running statistics with the
  parameters; "last-client" takes every buffer from the round's last client in ascending client
  id, as the release's FedAvg does (master.py line 283: the parameters are averaged into a copy
  of the last received model, whose buffers stay). Taking one client's statistics is a bug for
  one's own work, so fedkd does not follow the release by default; the paper's BatchNorm numbers
  (Tiny-ImageNet's ResNet-50 for FedGKD+ and MOON) came from code that does, and
  config/paper.yaml sets it for them.
"""

from __future__ import annotations

import json
from typing import Any

# key → its values, the default first
CHOICES: dict[str, tuple[str, ...]] = {
    "classifier_init": ("pytorch", "normal"),
    "weight_decay_exempt": ("block-norms", "none"),
    "bn_running_stats": ("average", "last-client"),
}
DEFAULTS: dict[str, str] = {key: values[0] for key, values in CHOICES.items()}

# what a run recorded before these keys existed did: a normal classifier on the ResNets only
# (the other models never re-initialised theirs), every parameter decayed, statistics averaged
RESNETS = ("resnet8", "resnet50")


def before_the_keys(model: str) -> dict[str, str]:
    """The behaviour of fedkd's code before these keys existed, for a run of ``model``."""
    return {
        "classifier_init": "normal" if model in RESNETS else "pytorch",
        "weight_decay_exempt": "none",
        "bn_running_stats": "average",
    }


def recorded_choices(spec: dict[str, Any], model: str) -> dict[str, str]:
    """The choices a run's recorded spec (run.json's ``spec``) ran under: a key it lacks was
    recorded before the key existed, and ran as fedkd did then."""
    old = before_the_keys(model)
    return {key: spec.get(key, old[key]) for key in CHOICES}


def applies(key: str, model: str, options: dict[str, Any] | None = None) -> bool:
    """Whether ``key`` can change a run of ``model``: the exempt norms and BatchNorm exist on
    the ResNets only, BatchNorm only with ``norm: batch``."""
    if key == "weight_decay_exempt":
        return model in RESNETS
    if key == "bn_running_stats":
        return model in RESNETS and (options or {}).get("norm") == "batch"
    return True


CAPTION_TEXT = {
    ("classifier_init", "normal"): "classifier initialised N(0, 0.01)",
    ("weight_decay_exempt", "none"): "weight decay on the norm layers too",
    ("bn_running_stats", "last-client"): "BatchNorm statistics from the round's last client",
}


def choice_departures(
    choices: dict[str, str] | str | None, model: str, options: dict[str, Any] | None = None
) -> list[str]:
    """Caption words for each choice (a mapping or its JSON) that departs from the default
    where it can change a run of ``model``, e.g. ``["classifier initialised N(0, 0.01)"]``."""
    if isinstance(choices, str):
        try:
            choices = json.loads(choices) if choices else {}
        except ValueError:
            return []
    if not isinstance(choices, dict):
        return []
    out = []
    for key, default in DEFAULTS.items():
        value = choices.get(key, default)
        if value != default and applies(key, model, options):
            out.append(CAPTION_TEXT.get((key, value), f"{key} {value}"))
    return out
