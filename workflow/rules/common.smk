"""Adapters from the rules' wildcards to the plan of the configuration (fedkd.pipeline.Plan), where
the logic lives and is unit-tested (tests/test_pipeline.py). See docs/pipeline.md."""

import json
import re

from fedkd.pipeline import Plan, validate_config
from fedkd.pipeline.plan import FEATURES_CODE
from fedkd.provenance import package_files_hash
from fedkd.report import sections

plan = Plan(config)


def names_regex(names) -> str:
    return "|".join(re.escape(n) for n in sorted(names)) or "(?!)"


# ----------------------------------------------------------------------------- partition and train


def partition_args(wc):
    return plan.partition_args(wc.dataset, wc.part, wc.clients, wc.seed)


def train_partition(wc):
    if not plan.uses_partition_file(wc.dataset):
        return []
    return [
        plan.run_spec(wc.dataset, wc.variant, wc.setting, wc.seed)["partition_file"]
    ]


def train_args(wc):
    return plan.train_args(wc.dataset, wc.variant, wc.setting, wc.seed)


def train_code_hash(wc):
    return plan.train_code_hash(wc.variant)


def train_stamp(wc):
    return plan.train_stamp(wc.dataset, wc.variant, wc.setting, wc.seed)


def train_resource(key, default):
    """resources.train, overridden per dataset by resources.train_datasets."""

    def get(wc):
        value = plan.train_resources(wc.dataset).get(key)
        return value if value is not None else default

    return get


def train_runtime(wc):
    return plan.train_runtime(wc.dataset, wc.setting)


# ----------------------------------------------------------------------------- tables and figures


def aggregate_inputs(wc):
    return plan.aggregate_inputs(wc.name)


def aggregate_args(wc):
    return plan.aggregate_args(wc.name)


def features_inputs(wc):
    return plan.features_inputs(wc.name)


def render_options(wc):
    return json.dumps(plan.render_options(wc.name), sort_keys=True)
