"""Statements of the README and the docs that the code or the shipped configuration decides,
checked against it: the default configuration's scale, the keys a variant may set, the layouts
config/README.md lists, the FedProx and FedDyn walk-throughs' code, every flag the docs give a
`fedkd` command, the conda environment's requirements, a default run's batched steps and each
strategy's knobs in docs/strategies.md. Offline
and fast: text files, the two offline datasets, and one pytest collection."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def schema_defs() -> dict:
    return yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text())["$defs"]


def test_the_readme_states_the_default_configurations_scale():
    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    readme = " ".join((ROOT / "README.md").read_text().split())
    m = re.search(r"at (\d+) clients, (\d+) rounds \((\d+) on synthtext\) and the papers' (\d+) seeds",
                  readme)  # fmt: skip
    assert m, "README: the default configuration's clients, rounds and seeds"
    defaults = config["defaults"]
    synthtext = {**defaults, **config["datasets"]["synthtext"]}
    mnist5k = {**defaults, **config["datasets"]["mnist5k"]}
    assert [int(g) for g in m.groups()] == [
        mnist5k["clients"], mnist5k["rounds"], synthtext["rounds"], len(config["seeds"])
    ]  # fmt: skip
    assert synthtext["clients"] == mnist5k["clients"]


def test_config_readme_names_the_keys_a_variant_may_set_and_those_it_may_not():
    defs = schema_defs()
    allowed = list(defs["variantSpec"]["properties"])
    path_keys = defs["pathKeys"]
    others = [k for k in defs["runKeys"]["properties"] if k not in allowed and k not in path_keys]
    text = " ".join((ROOT / "config/README.md").read_text().split())
    m = re.search(r"A variant's `spec` .*? takes the training keys that shape what is trained: (.*?)\. "
                  r"How and where a run trains \((.*?)\), (.*?) are not a variant's", text)  # fmt: skip
    assert m, "config/README.md: the keys of a variant's spec"
    listed = re.findall(r"`(\w+)`", m[1])
    not_variant = re.findall(r"`(\w+)`", m[2] + m[3])
    assert listed == allowed
    assert sorted(not_variant) == sorted(others) and "engine" in not_variant


def test_config_readme_lists_every_layout_in_the_registry():
    from fedkd.report.targets import LAYOUTS
    from recipe_checks import layout_list_of, layout_rows_of

    readme = (ROOT / "config/README.md").read_text()
    assert layout_list_of(readme) == set(LAYOUTS)
    assert layout_rows_of(readme) >= set(LAYOUTS)


@pytest.mark.parametrize("dataset", ["mnist5k", "synthtext"])
def test_performance_md_gives_the_batched_steps_of_a_default_run(dataset):
    """docs/performance.md: the batched steps of a run of the default configuration, beside the
    bound above which a run compiles its step (its equal-size clients, all of one size)."""
    from fedkd.data import load_dataset
    from fedkd.runtime.schedule import steps_per_round

    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    run = {**config["defaults"], **config["datasets"][dataset]}
    assert run["partition"] == "dirichlet-equal"
    per_client = len(load_dataset(dataset).train.y) // run["clients"]
    steps = run["rounds"] * steps_per_round(per_client, run["local_epochs"], run["batch_size"])
    text = " ".join((ROOT / "docs/performance.md").read_text().split())
    m = re.search(r"a run of the default configuration (\d+) \((\d+) on synthtext\)", text)
    assert m, "docs/performance.md: a default run's batched steps"
    assert steps == int(m[2] if dataset == "synthtext" else m[1])


def test_the_fedprox_walk_through_shows_the_whole_module_and_its_test():
    doc = (ROOT / "docs/adding-a-strategy.md").read_text()
    walk = doc[doc.index("## A walk through `fedprox.py`") : doc.index("## The test")]
    assert "The whole module:" in walk
    module = re.search(r"```python\n(.*?)```", walk, re.S)[1]
    assert module == (ROOT / "src/fedkd/strategies/fedprox.py").read_text()
    test = doc[doc.index("## The test") :]
    m = re.search(r"\(in `(tests/\w+\.py)`\):\n\n```python\n(.*?)```", test, re.S)
    assert m, "docs/adding-a-strategy.md: FedProx's test and its file"
    assert f"{m[2]}\n" in (ROOT / m[1]).read_text(), "the test is the file's, whole"


def test_the_feddyn_walk_through_shows_the_modules_code():
    doc = (ROOT / "docs/adding-a-strategy.md").read_text()
    section = doc[doc.index("## A strategy with per-client and server state") :]
    block = re.search(r"```python\n(.*?)```", section, re.S)[1]
    module = (ROOT / "examples/feddyn/feddyn.py").read_text()
    methods = block.split("\n\n")
    assert len(methods) == 3 and all(m in module for m in methods), "the excerpt is the module's"
    for hook in ("payload", "client_begin", "local_loss", "client_end", "aggregate",
                 "server_update", "state_dict"):  # fmt: skip
        assert f"`{hook}(" in section, hook


@pytest.mark.slow  # two pytest collections, each importing torch
def test_the_shared_strategy_tests_cover_an_outside_module_only_when_it_is_exported():
    """docs/adding-a-strategy.md: the tests every strategy passes parametrize over the strategies
    registered when pytest starts."""
    feddyn = str(ROOT / "examples/feddyn/feddyn.py")

    def collected(env_value: str | None) -> str:
        env = {k: v for k, v in os.environ.items() if k != "FEDKD_STRATEGY_MODULES"}
        if env_value:
            env["FEDKD_STRATEGY_MODULES"] = env_value
        cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
               "-o", "addopts=", "tests/test_strategy_params.py"]  # fmt: skip
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    assert "feddyn" in collected(feddyn)
    assert "feddyn" not in collected(None)


def command_flags() -> dict[str, set[str]]:
    """Each `fedkd` subcommand → the flags its parser takes."""
    import argparse

    from fedkd.cli import build_parser
    from fedkd.tools.bench.command import add_arguments

    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    flags = {
        name: {flag for action in sub._actions for flag in action.option_strings}
        for name, sub in commands.choices.items()
    }
    bench = argparse.ArgumentParser()
    add_arguments(bench)  # `fedkd bench` hands its arguments to the bench's own parser
    flags["bench"] |= {flag for action in bench._actions for flag in action.option_strings}
    return flags


def test_every_flag_the_docs_give_a_fedkd_command_is_one_it_takes():
    flags = command_flags()
    docs = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md", ROOT / "config/README.md"]
    docs += sorted((ROOT / "examples").rglob("*.md"))
    checked, unknown = 0, []
    for path in docs:
        text = path.read_text(encoding="utf-8").replace("\\\n", " ")  # a command's next lines
        for m in re.finditer(r"fedkd ([a-z]+)((?: +[^\s`|]+)*)", text):
            if m[1] not in flags:
                continue  # prose ("fedkd regenerates ...")
            for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", m[2]):
                checked += 1
                if flag not in flags[m[1]]:
                    unknown.append(f"{path.relative_to(ROOT)}: fedkd {m[1]} {flag}")
    assert not unknown, "flags the commands do not take:\n" + "\n".join(unknown)
    assert checked > 100, f"only {checked} flags found: the pattern no longer reads the docs"


def test_the_conda_environment_asks_what_the_package_requires():
    """envs/fedkd.yaml (the jobs' environment under `--software-deployment-method conda`) lists
    each of pyproject.toml's requirements with the same bounds, so conda, not the pip step
    that installs the package, chooses its builds."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    required = project["dependencies"]
    env = yaml.safe_load((ROOT / "envs/fedkd.yaml").read_text())["dependencies"]
    pip = next(entry["pip"] for entry in env if isinstance(entry, dict))
    listed = {}
    for spec in [e for e in env if isinstance(e, str)] + [e for e in pip if e[0] != "-"]:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)(.*)", spec)
        name = {"pytorch": "torch"}.get(m[1], m[1])  # conda-forge's name of torch
        listed[name] = SpecifierSet(m[2])
    assert len(required) > 10
    for text in required:
        req = Requirement(text)
        assert req.name in listed, f"envs/fedkd.yaml does not list {text}"
        assert listed[req.name] == req.specifier, f"envs/fedkd.yaml: {req.name}{listed[req.name]}"
    # the package's Python floor (Snakemake 9's own: it needs 3.11) holds in the environment too
    assert set(SpecifierSet(project["requires-python"])) <= set(listed["python"]), listed["python"]


def test_docs_strategies_names_every_parameter_of_every_strategy():
    """`fedkd strategies --details` lists a strategy's parameters; docs/strategies.md names each
    in its entry (or in the one its entry says it shares "the same knobs as"), for every strategy
    that ships with fedkd (not a module of one's own, named in FEDKD_STRATEGY_MODULES)."""
    import dataclasses

    from fedkd.strategies import get_strategy_class, strategy_names

    text = (ROOT / "docs/strategies.md").read_text()
    entries = dict(re.findall(r"^- \*\*([^*]+)\*\*(.*?)(?=^- \*\*|^#|\Z)", text, re.S | re.M))
    missing = {}
    shipped = [n for n in strategy_names() if get_strategy_class(n).__module__.startswith("fedkd.")]
    assert "fedprox" in shipped
    for name in shipped:
        assert name in entries, f"docs/strategies.md has no entry for {name!r}"
        entry = entries[name]
        shared = re.search(r"the same knobs as (\S+?)[.,;]", entry)
        if shared:
            entry += entries[shared[1]]
        fields = [f.name for f in dataclasses.fields(get_strategy_class(name).Params)]
        missing[name] = [f for f in fields if f"`{f}`" not in entry]
    assert not {k: v for k, v in missing.items() if v}, missing
    # the files a shipped strategy touches, as docs/adding-a-strategy.md lists them, include its
    # entry there, with the test that asks for it
    recipe = (ROOT / "docs/adding-a-strategy.md").read_text()
    files = re.findall(r"^\| `([^`]+)`", recipe.split("## A walk through")[0], re.M)
    assert "docs/strategies.md" in files, files
    assert "tests/test_doc_statements.py" in recipe


def test_config_readme_states_each_rules_resources_without_an_entry():
    """The rules' own defaults (workflow/rules/*.smk, and Plan.train_runtime's 60 minutes)."""
    rules = " ".join(p.read_text() for p in sorted((ROOT / "workflow/rules").glob("*.smk")))
    asked = {}
    for rule, key, value in re.findall(r'rule_resource\("(\w+)", "(\w+)", (\d+)\)', rules):
        assert asked.setdefault((rule, key), value) == value, (rule, key)
    train = dict(re.findall(r'train_resource\("(\w+)", (\d+)\)', rules))
    from fedkd.pipeline.plan import Plan

    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    config.pop("resources", None)
    runtime = Plan(config).train_runtime("mnist5k", "iid-K10-C0.2-E1-R10")
    text = " ".join((ROOT / "config/README.md").read_text().split())
    said = (
        f"Without a `resources` entry a rule asks for: `train` {train['threads']} thread, "
        f"{train['gpu']} GPU, {train['mem_mb']} MB, {runtime} minutes; `partition` "
        f"{asked['partition', 'mem_mb']} MB, {asked['partition', 'runtime']} minutes; `aggregate` "
        f"and `render` {asked['aggregate', 'mem_mb']} MB, {asked['aggregate', 'runtime']} minutes."
    )
    assert said in text
    assert asked["aggregate", "mem_mb"] == asked["render", "mem_mb"]
    assert asked["aggregate", "runtime"] == asked["render", "runtime"]
