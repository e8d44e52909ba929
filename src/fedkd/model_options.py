"""What each model's ``model_options`` may hold (the keywords of fedkd.models.build_model it
uses), checked when a run spec is read or a rate is named (bench/gpu_rates.py)."""

from __future__ import annotations

from typing import Any

from fedkd.echo import safe_text, shown
from fedkd.values import is_int

# the stand-in CNN's widest layer (channels, hidden): the papers' widest is ResNet-50's 2,048;
# [1e6, 1e6] channels asked torch for about 100 TB and failed there, far from the spec
MAX_CNN_WIDTH = 4_096


def _model_option_checks() -> dict[str, dict[str, Any]]:
    """Each model's options (the keywords of fedkd.models.build_model it uses) → a check that
    returns an error text or None. tests/test_config.py holds the names to build_model's."""
    from fedkd.models.resnet import NORMS

    def choice(*options):
        return lambda v: (
            None if v in options else f"is unknown; choose one of: {', '.join(options)}"
        )

    def width(v):
        ok = is_int(v) and 1 <= v <= MAX_CNN_WIDTH
        return None if ok else f"must be an integer from 1 to {MAX_CNN_WIDTH:,}"

    def two_widths(v):
        ok = isinstance(v, (list, tuple)) and len(v) == 2 and all(width(c) is None for c in v)
        return None if ok else f"must be two integers from 1 to {MAX_CNN_WIDTH:,}, e.g. [16, 32]"

    def text_or_null(v):
        return None if v is None or isinstance(v, str) else "must be a name or path, or null"

    def mapping(v):
        return None if isinstance(v, dict) else "must be a mapping"

    head = {"head_init": choice("default", "he")}
    resnet = {"norm": choice(*NORMS), **head}
    return {
        "resnet8": resnet,
        "resnet50": resnet,
        "cnn": {"channels": two_widths, "hidden": width, **head},
        "distilbert": {"pretrained": text_or_null, "text_config": mapping, **head},
    }


def model_option_errors(model: str, options: dict[str, Any]) -> list[str]:
    """``model_options`` against what ``model`` accepts, each option's value included."""
    accepted = _model_option_checks()[model]
    errors = []
    for key, value in options.items():
        if key not in accepted:
            errors.append(
                f"model_options.{safe_text(key)} is not an option of model {shown(model)}; its "
                "options are: "
                f"{', '.join(sorted(accepted))}"
            )
            continue
        problem = accepted[key](value)
        if problem:
            errors.append(f"model_options.{safe_text(key)}={shown(value)} {problem}")
    return errors
