"""Layout ``dataset_stats`` (FedGKD Table 2): per dataset, its task, split sizes, classes and clients,
read from the runs' aggregate."""

from __future__ import annotations

import pandas as pd

from fedkd.report.options import Options
from fedkd.report.tables.common import caption_and_label
from fedkd.report.text import (
    DASH,
    Text,
    format_key_value,
    key_value,
)
from fedkd.report.writers import TableDoc


def build(df: pd.DataFrame, opts: Options) -> TableDoc:
    from fedkd.data import dataset_names

    known = dataset_names()

    names = opts.mapping("row_names")
    present = list(dict.fromkeys(df["dataset"]))
    wanted = opts.str_list("datasets")
    if wanted is None:
        order = sorted(present, key=lambda d: (known.index(d) if d in known else 99, d))
    else:
        # datasets not listed are kept, after the listed ones: a table never drops data silently
        order = wanted + [d for d in present if d not in wanted]
    first = df.drop_duplicates("run")
    cols = [
        ("dataset_kind", "Task"),
        ("train_size", "Train"),
        ("val_size", "Validation"),
        ("test_size", "Test"),
        ("num_classes", "Classes"),
        ("clients", "Clients"),
    ]
    body, recs = [], []
    for ds in order:
        runs = first[first["dataset"] == ds]
        row = [Text.plain(format_key_value("dataset", ds, names))]
        rec = {"dataset": ds}
        for col, _ in cols:
            found = {key_value(v) for v in runs[col]} - {None} if col in runs else set()
            values = sorted(found, key=lambda v: (isinstance(v, str), str(v).zfill(20)))
            row.append(Text.plain(", ".join(_count(v) for v in values) if values else DASH))
            rec[col] = ";".join(str(v) for v in values)
        body.append(row)
        recs.append(rec)
    caption, label = caption_and_label(opts)
    header = [Text("Dataset", "Dataset")] + [Text.plain(h) for _, h in cols]
    return TableDoc(caption, label, header, body, 2, pd.DataFrame(recs), blank_repeats=False)


def _count(v) -> str:
    return f"{v:,}" if isinstance(v, int) else str(v)
