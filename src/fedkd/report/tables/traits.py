"""Layout ``traits`` (FedGKD Table 1): which strategies share extra information, need proxy data
or modify the model, from each registered strategy's own traits."""

from __future__ import annotations

import pandas as pd

from fedkd.report.options import Options
from fedkd.report.tables.common import caption_and_label
from fedkd.report.text import (
    Text,
    label_text,
)
from fedkd.report.writers import TableDoc

TRAIT_COLUMNS = ("Add. inf. sharing", "Proxy data", "Model modification")


def build(_source: None, opts: Options) -> TableDoc:
    from fedkd.strategies import get_strategy_class, strategy_names

    names = opts.mapping("names")
    strategies = opts.str_list("strategies", strategy_names())
    body, recs = [], []
    for name in strategies:
        cls = get_strategy_class(name)  # names the unknown strategy and lists the known ones
        tr = cls.traits
        shares = str(tr.extra_information).strip().lower() not in ("", "none")
        flags = (shares, bool(tr.proxy_data), bool(tr.modifies_model))
        body.append([label_text(name, names)] + [_mark(f) for f in flags])
        recs.append(
            {
                "strategy": name,
                "extra_information_shared": shares,
                "extra_information": tr.extra_information,
                "proxy_data": bool(tr.proxy_data),
                "modifies_model": bool(tr.modifies_model),
                "paper": cls.paper,
            }
        )
    caption, label = caption_and_label(opts)
    return TableDoc(
        caption, label,
        [Text("Method", "Method")] + [Text.plain(c) for c in TRAIT_COLUMNS],
        body, 1, pd.DataFrame(recs), needs=("booktabs", "amssymb"),
    )  # fmt: skip


def _mark(flag: bool) -> Text:
    return Text(r"$\checkmark$", "✓") if flag else Text(r"$\times$", "✗")


def check_entry(where: str, entry: dict, points: list[dict]) -> list[str]:
    """Config check: the rows are given, and are registered strategies."""
    from fedkd.strategies import strategy_names

    wanted = (entry.get("options") or {}).get("strategies")
    if not wanted:
        return [f"{where}.options.strategies: layout traits needs the list of strategies"]
    known = strategy_names()
    return [
        f"{where}.options.strategies: {s!r} is not a registered strategy" for s in wanted
        if s not in known
    ]  # fmt: skip
