"""The run-level choices where the papers are silent and the FedGKD authors' released code decides
(fedkd.run_choices): the classifier's initialisation, which parameters weight decay spares (the
same in both trainers), and where the global model's BatchNorm statistics come from."""

import json
import math

import pandas as pd
import pytest
import torch

from fedkd.config import RunSpec, SpecError
from fedkd.engine.optim import ForeachSGD
from fedkd.engine.run import Run
from fedkd.engine.running_stats import global_buffers
from fedkd.engine.sequential import make_optimizer
from fedkd.models import build_model
from fedkd.report.setting import setting_sentence
from fedkd.run_choices import DEFAULTS, choice_departures, recorded_choices
from fedkd.strategies.base import ClientUpdate
from small_runs import cifar_shaped

CIFAR = (3, 32, 32)
# a small run: 6 clients of unequal size, 3 a round, one local epoch of 8-image batches
SMALL = dict(
    dataset="cifar10", model="resnet8", clients=6, participation=0.5, partition="dirichlet",
    alpha=0.5, local_epochs=1, rounds=1, batch_size=8, seed=3, device="cpu",
    memory_format="contiguous", augment="none",
)  # fmt: skip


def run_of(tmp_path, name: str, **keys) -> Run:
    run = Run(RunSpec(**{**SMALL, **keys}), tmp_path / name, log=lambda m: None, dataset=DATA)
    run.run()
    return run


DATA = cifar_shaped()


# ----------------------------------------------------------------------- classifier initialisation
def test_the_default_classifier_keeps_pytorchs_linear_init():
    """nn.Linear's own init: weights and bias uniform in +-1/sqrt(fan_in), so a weight std of
    1/sqrt(3 fan_in) (0.072 for ResNet-8's 64 features; the released code's measured 0.0725)."""
    assert DEFAULTS["classifier_init"] == "pytorch" and RunSpec().classifier_init == "pytorch"
    for name, shape, classes, fan_in in (
        ("resnet8", CIFAR, 10, 64), ("resnet50", (3, 64, 64), 200, 2048),
    ):  # fmt: skip
        torch.manual_seed(0)
        head = build_model(name, classes, shape).classifier.requires_grad_(False)
        bound = 1 / math.sqrt(fan_in)
        assert float(head.weight.abs().max()) <= bound
        assert float(head.weight.std()) == pytest.approx(bound / math.sqrt(3), rel=0.1)
        assert float(head.bias.abs().max()) <= bound and float(head.bias.abs().min()) > 0


def test_classifier_init_normal_draws_n_0_001_and_leaves_every_other_weight_alone():
    torch.manual_seed(0)
    default = build_model("resnet50", 200, (3, 64, 64))
    torch.manual_seed(0)
    normal = build_model("resnet50", 200, (3, 64, 64), classifier_init="normal")
    w = normal.classifier.weight.detach()
    assert float(w.mean()) == pytest.approx(0, abs=1e-4)
    assert float(w.std()) == pytest.approx(0.01, rel=0.01)  # 409,600 draws
    assert torch.equal(normal.classifier.bias, torch.zeros(200))
    # drawn after every other layer: the rest of the model is the same draw
    same = {n: p for n, p in default.state_dict().items() if not n.startswith("classifier.")}
    for n, p in same.items():
        assert torch.equal(p, normal.state_dict()[n]), n
    with pytest.raises(ValueError, match="classifier_init='he' is unknown"):
        build_model("cnn", 10, CIFAR, classifier_init="he")


def test_a_run_initialises_its_classifier_as_its_spec_says(tmp_path):
    stds = {}
    for init in ("pytorch", "normal"):
        run = Run(RunSpec(**SMALL, classifier_init=init), tmp_path / init, log=lambda m: None,
                  dataset=DATA)  # fmt: skip
        run.prepare()
        stds[init] = float(run.global_model.classifier.weight.detach().std())
    assert stds["pytorch"] == pytest.approx(1 / math.sqrt(3 * 64), rel=0.15)
    assert stds["normal"] == pytest.approx(0.01, rel=0.15)


# ----------------------------------------------------------------------- weight decay
def resnet8_block_norms() -> set[str]:
    """The release's bn* layers in fedkd's ResNet-8: the stem's norm and each block's two."""
    names = {"stem.1"} | {f"stages.{s}.0.norm{i}" for s in range(3) for i in (1, 2)}
    return {f"{n}.{p}" for n in names for p in ("weight", "bias")}


def test_weight_decay_spares_exactly_the_stem_and_block_norms():
    torch.manual_seed(0)
    resnet8 = build_model("resnet8", 10, CIFAR)
    assert resnet8.block_norm_parameters() == resnet8_block_norms()
    shortcut = {n for n, _ in resnet8.named_parameters() if ".shortcut.1." in n}
    assert shortcut and not shortcut & resnet8.block_norm_parameters()  # decayed, as released
    resnet50 = build_model("resnet50", 200, (3, 64, 64), norm="batch")
    spared = resnet50.block_norm_parameters()
    # the stem's norm and 3 per Bottleneck (16 of them), weight and bias each
    assert len(spared) == 2 * (1 + 3 * 16)
    assert all(n == "stem.1.weight" or n == "stem.1.bias" or ".norm" in n for n in spared)
    # the CNN has no norm layer; the release names no DistilBERT parameter bn*
    assert build_model("cnn", 10, CIFAR).block_norm_parameters() == set()
    text = build_model("distilbert", 4, (16,), vocab_size=100)
    assert text.block_norm_parameters() == set()


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_the_optimizer_decays_all_but_the_spared_parameters(optimizer):
    """With a zero loss gradient a step is pure weight decay: the spared parameters stay put,
    every other one moves; with weight_decay_exempt none all move."""
    for rule, spared in (("block-norms", resnet8_block_norms()), ("none", set())):
        torch.manual_seed(0)
        model = build_model("resnet8", 10, CIFAR)
        for p in model.parameters():
            p.data.add_(0.5)  # no parameter at 0, where decay would not show
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        spec = RunSpec(**SMALL, optimizer=optimizer, weight_decay=0.1, weight_decay_exempt=rule)
        opt = make_optimizer(model, spec, spec.lr)
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        opt.step()
        moved = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
        assert moved == set(before) - spared, rule


def test_foreach_sgd_with_parameter_groups_is_bit_identical_to_torch_sgd():
    torch.manual_seed(0)
    ref = build_model("resnet8", 10, CIFAR)
    ours = build_model("resnet8", 10, CIFAR)
    ours.load_state_dict(ref.state_dict())

    def groups(model):
        spared = model.block_norm_parameters()
        named = list(model.named_parameters())
        return [
            {"params": [p for n, p in named if n not in spared], "weight_decay": 1e-2},
            {"params": [p for n, p in named if n in spared], "weight_decay": 0.0},
        ]

    opts = (
        torch.optim.SGD(groups(ref), lr=0.05, momentum=0.9, foreach=True),
        ForeachSGD(groups(ours), lr=0.05, momentum=0.9),
    )
    for step in range(3):
        x, y = torch.randn(4, *CIFAR), torch.randint(0, 10, (4,))
        for model, opt in zip((ref, ours), opts, strict=True):
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(x), y).backward()
            if step == 1:  # a parameter without a gradient is left alone, decay included
                model.stem[1].weight.grad = None
            opt.step()
        for (n, a), b in zip(ref.named_parameters(), ours.parameters(), strict=True):
            assert torch.equal(a, b), f"step {step}: {n}"


def test_both_trainers_spare_the_same_parameters(tmp_path):
    """Under a strong weight decay the batched trainer ends where the sequential one does, and
    both far from where decaying the norms too would take them."""
    keys = dict(weight_decay=0.05, lr=0.05)
    seq = run_of(tmp_path, "seq", engine="sequential", **keys)
    batched = run_of(tmp_path, "batched", engine="batched", **keys)
    everything = run_of(tmp_path, "all", engine="sequential", weight_decay_exempt="none", **keys)
    assert json.loads((tmp_path / "batched" / "run.json").read_text())["engine"]["used"] == (
        "batched"
    )
    init = Run(RunSpec(**SMALL), tmp_path / "init", log=lambda m: None, dataset=DATA)
    init.prepare()

    def moved(a, b, names) -> float:
        return float(sum((a[n] - b[n]).double().norm() ** 2 for n in names) ** 0.5)

    g_seq, g_batched = seq.global_model.state_dict(), batched.global_model.state_dict()
    g_all, g_init = everything.global_model.state_dict(), init.global_model.state_dict()
    norms = sorted(resnet8_block_norms())
    # the trainers agree up to summation order, on the spared norms as on all weights
    assert moved(g_seq, g_batched, norms) <= 1e-3 * moved(g_seq, g_init, norms)
    assert moved(g_seq, g_batched, g_seq) <= 1e-3 * moved(g_seq, g_init, g_seq)
    # and the rule matters far beyond that difference
    assert moved(g_seq, g_all, norms) > 100 * moved(g_seq, g_batched, norms)


def test_flat_optimizers_leave_the_spared_columns_undecayed():
    from fedkd.engine.flat_optim import FlatAdam, FlatSGD

    class Spec:
        lr, momentum, weight_decay = 0.1, 0.9, 0.5

    rows = torch.full((2, 4), 2.0)
    decayed = torch.tensor([True, False, True, False])
    for cls in (FlatSGD, FlatAdam):
        p = rows.clone()
        opt = cls(p, Spec, decayed)
        coef = opt.coefficients(torch.ones(1, 2), Spec.lr)
        opt.step(p, torch.zeros(2, 4), coef[0], torch.zeros(2, dtype=torch.bool))
        assert torch.equal(p[:, ~decayed], rows[:, ~decayed]), cls
        assert (p[:, decayed] < 2.0).all(), cls


def test_sparing_columns_from_decay_costs_no_kernel_a_step():
    """The exempt columns' zero decay is made once per run, not multiplied by the clients' rows
    each step: a step with exemptions dispatches as many kernels as one without."""
    from fedkd.engine.flat_optim import FlatAdam, FlatSGD
    from fedkd.tools.opcount import count_ops

    class Spec:
        lr, momentum, weight_decay = 0.1, 0.9, 0.5

    decayed = torch.tensor([True, False, True, False])
    for cls in (FlatSGD, FlatAdam):
        kernels = []
        for columns in (None, decayed):
            p = torch.full((2, 4), 2.0)
            opt = cls(p, Spec, columns)
            coef = opt.coefficients(torch.ones(1, 2), Spec.lr)[0]
            with count_ops() as counted:
                opt.step(p, torch.ones(2, 4), coef, torch.zeros(2, dtype=torch.bool))
            kernels.append(counted.kernels)
        assert kernels[0] == kernels[1], (cls, kernels)


# ----------------------------------------------------------------------- BatchNorm statistics
def test_the_global_models_batchnorm_statistics_follow_bn_running_stats(tmp_path):
    """average: the parameters and the statistics are the clients' mean; last-client: the
    parameters still are, the statistics (every buffer) are the round's highest-id client's."""
    from fedkd.engine.client import train_clients
    from fedkd.runtime.seeding import sample_clients

    spec = RunSpec(**SMALL, model_options={"norm": "batch"})
    run = Run(spec, tmp_path / "probe", log=lambda m: None, dataset=DATA)
    run.prepare()
    selected = sample_clients(spec.seed, 0, spec.clients, spec.participation)
    payload = run.strategy.payload(0, run.global_model)
    updates, _ = train_clients(0, selected, run.global_model, payload, run.strategy, run.env)
    averaged = run.strategy.aggregate(0, run.global_model, updates)
    params = {n for n, _ in run.global_model.named_parameters()}
    buffers = [n for n in averaged if n not in params]
    assert any(n.endswith("running_mean") for n in buffers)
    last = updates[-1]
    assert last.client_id == max(selected)
    # the clients' statistics differ, so the rule is seen
    assert not torch.equal(
        updates[0].state["stem.1.running_mean"], last.state["stem.1.running_mean"]
    )
    assert global_buffers(averaged, updates, run.global_model, "average") is averaged
    taken = global_buffers(averaged, updates, run.global_model, "last-client")
    for n in buffers:
        assert torch.equal(taken[n], last.state[n]), n
    for n in params:
        assert torch.equal(taken[n], averaged[n]), n
    # a whole round: the run's global model is what the rule makes of the same uploads
    for rule, expected in (("average", averaged), ("last-client", taken)):
        whole = run_of(tmp_path, rule, model_options={"norm": "batch"}, bn_running_stats=rule)
        state = whole.global_model.state_dict()
        for n in buffers:
            assert torch.equal(state[n], expected[n]), (rule, n)
    with pytest.raises(ValueError, match="bn_running_stats='first' is unknown"):
        global_buffers(averaged, updates, run.global_model, "first")


def test_global_buffers_take_the_highest_client_id_whatever_the_order():
    model = torch.nn.BatchNorm1d(2)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    ups = [
        ClientUpdate(c, {**state, "running_mean": torch.full((2,), float(c))}, 1, 1, 0.0)
        for c in (7, 2, 5)
    ]
    out = global_buffers(state, ups, model, "last-client")
    assert torch.equal(out["running_mean"], torch.full((2,), 7.0))
    assert out["weight"] is state["weight"]


def _record_global_buffers(monkeypatch) -> list[tuple[list, dict]]:
    """(uploads, global state after the rule) of every round a run trains from now on."""
    import fedkd.engine.run as engine_run

    rounds = []

    def recorded(state, updates, model, rule):
        out = global_buffers(state, updates, model, rule)
        rounds.append((updates, {k: v.clone() for k, v in out.items()}))
        return out

    monkeypatch.setattr(engine_run, "global_buffers", recorded)
    return rounds


def _stats(model) -> list[str]:
    params = {n for n, _ in model.named_parameters()}
    return [k for k in model.state_dict() if k not in params]


BN_LAST = dict(model_options={"norm": "batch"}, bn_running_stats="last-client")


def test_feddf_distils_from_the_last_clients_statistics_in_train_mode(tmp_path, monkeypatch):
    """FedDF's code (pcode/aggregation/noise_knowledge_transfer.py, adv_knowledge_transfer.py
    prepare_model): the student is a copy of the FedAvg model, which carries the last client's
    statistics, trained in train mode, so its BatchNorm statistics move on the unlabeled data;
    the teachers are the received models in eval mode with their own statistics."""
    from fedkd.strategies.feddf import FedDF

    rounds, seen = _record_global_buffers(monkeypatch), []
    distill = FedDF._distill

    def watched(self, round, student, teachers):
        start = {k: v.clone() for k, v in student.state_dict().items()}
        means = []  # the stem's running mean before each training forward

        def before_forward(model, _):
            if model.training:
                means.append(model.state_dict()["stem.1.running_mean"].clone())

        hook = student.register_forward_pre_hook(before_forward)
        try:
            result = distill(self, round, student, teachers)
        finally:
            hook.remove()
        seen.append((start, teachers, means, result))
        return result

    monkeypatch.setattr(FedDF, "_distill", watched)
    params = {"max_steps": 4, "eval_every": 4, "patience": 4, "unlabeled": "noise"}
    run = run_of(tmp_path, "feddf", strategy="feddf", params=params, **BN_LAST)
    (updates, aggregated), (start, teachers, means, (steps, best_step, _)) = rounds[0], seen[0]
    last = max(updates, key=lambda u: u.client_id)
    stats = _stats(run.global_model)
    assert all(torch.equal(start[k], last.state[k]) for k in stats)
    assert all(torch.equal(start[k], aggregated[k]) for k in start)
    assert len(means) == steps == 4 and not torch.equal(means[0], means[-1])
    for teacher, update in zip(teachers, updates, strict=True):
        assert not teacher.training
        assert all(torch.equal(teacher.state_dict()[k], update.state[k]) for k in stats)
    # the kept model's statistics are the student's at its kept step: a forward per step
    kept = run.global_model.state_dict()["stem.1.num_batches_tracked"]
    assert int(kept) == int(last.state["stem.1.num_batches_tracked"]) + best_step


def test_fedgkds_teacher_averages_the_buffered_global_models_statistics(tmp_path, monkeypatch):
    """The FedGKD release (pcode/masters/master_fedgkd.py ensemble_historical_models) averages
    every state-dict entry of the buffered FedAvg models, each with its round's last client's
    statistics, and its worker's teacher runs in eval mode (workers/worker.py _turn_off_grad)."""
    from fedkd.strategies._buffer import BufferedStrategy

    rounds, caught = _record_global_buffers(monkeypatch), []
    teachers_from = BufferedStrategy.teachers_from

    def watched(self, client, states):
        models = teachers_from(self, client, states)
        caught.append(([dict(s) for s in self.buffer.states], models[0]))
        return models

    monkeypatch.setattr(BufferedStrategy, "teachers_from", watched)
    run_of(tmp_path, "fedgkd", strategy="fedgkd", params={"buffer": 2}, rounds=3, **BN_LAST)
    buffered, teacher = caught[-1]
    assert len(buffered) == 2 and not teacher.training
    for state, (updates, _) in zip(buffered, rounds[:2], strict=True):
        last = max(updates, key=lambda u: u.client_id)
        assert torch.equal(state["stem.1.running_var"], last.state["stem.1.running_var"])
    for k in ("stem.1.running_mean", "stem.1.running_var"):
        mean = (buffered[0][k].double() + buffered[1][k].double()) / 2
        got = teacher.state_dict()[k].double()
        assert float((got - mean).norm() / mean.norm()) < 1e-6, k


# ----------------------------------------------------------------------- spec, record, caption
def test_the_choices_are_spec_keys_checked_and_recorded_in_run_json(tmp_path):
    for key, bad in (
        ("classifier_init", "zero"), ("weight_decay_exempt", "all"), ("bn_running_stats", "first"),
    ):  # fmt: skip
        with pytest.raises(SpecError, match=f"{key}='{bad}' is unknown; choose one of"):
            RunSpec(**{key: bad})
    assert RunSpec(classifier_init="normal").hash() != RunSpec().hash()
    run_of(tmp_path, "rec", classifier_init="normal", weight_decay_exempt="none")
    spec = json.loads((tmp_path / "rec" / "run.json").read_text())["spec"]
    assert (spec["classifier_init"], spec["weight_decay_exempt"], spec["bn_running_stats"]) == (
        "normal", "none", "average",
    )  # fmt: skip


def test_a_record_without_the_keys_ran_as_fedkd_did_before_them():
    assert recorded_choices({}, "resnet8") == {
        "classifier_init": "normal", "weight_decay_exempt": "none", "bn_running_stats": "average",
    }  # fmt: skip
    assert recorded_choices({}, "cnn")["classifier_init"] == "pytorch"
    assert recorded_choices(RunSpec().to_dict(), "resnet8") == DEFAULTS


def test_captions_name_the_choices_that_depart_where_they_apply():
    departed = {"classifier_init": "normal", "weight_decay_exempt": "none",
                "bn_running_stats": "last-client"}  # fmt: skip
    assert choice_departures(DEFAULTS, "resnet8") == []
    assert choice_departures(json.dumps(departed), "resnet50", {"norm": "batch"}) == [
        "classifier initialised N(0, 0.01)",
        "weight decay on the norm layers too",
        "BatchNorm statistics from the round's last client",
    ]
    # no norm layer to spare, no BatchNorm to take statistics from
    assert choice_departures(departed, "cnn") == ["classifier initialised N(0, 0.01)"]
    assert choice_departures(departed, "resnet8", {"norm": "group"}) == [
        "classifier initialised N(0, 0.01)", "weight decay on the norm layers too",
    ]  # fmt: skip
    df = pd.DataFrame(
        {"run": ["a", "b"], "model": ["resnet8", "resnet8"], "model_options": ["{}", "{}"],
         "run_choices": [json.dumps(DEFAULTS), json.dumps(departed)]}
    )  # fmt: skip
    sentence = setting_sentence(df)
    assert "classifier initialised N(0, 0.01)" in sentence
    assert "BatchNorm" not in sentence  # GroupNorm runs
    assert "N(0, 0.01)" not in setting_sentence(df.iloc[:1])
