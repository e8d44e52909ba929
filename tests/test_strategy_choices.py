"""The published behaviours a strategy parameter selects, each on constructed tensors:
MOON's negative on a client's first participation (first_negative) and FedNTD's tau^2 factor
(tau_squared)."""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from fedkd.config import RunSpec, SpecError
from fedkd.engine.sequential import local_loss_on
from fedkd.runtime.seeding import derive_seed
from fedkd.strategies.base import ClientContext, LocalBatch, ServerContext
from fedkd.strategies.fedntd import FedNTD, FedNTDParams, not_true_kl
from fedkd.strategies.moon import Moon, MoonParams

LN2 = math.log(2.0)
MU, TAU = 2.0, 0.5


class Features(nn.Module):
    """A model whose features are x @ W^T: the features of constructed weights are known."""

    def __init__(self, weight=None):
        super().__init__()
        self.proj = nn.Linear(3, 3, bias=False)  # drawn from torch's RNG unless given
        if weight is not None:
            with torch.no_grad():
                self.proj.weight.copy_(torch.as_tensor(weight, dtype=torch.float32))

    def features(self, x):
        return self.proj(x)

    def features_and_logits(self, x):
        f = self.features(x)
        return f, f


def ctx(seed=3) -> ServerContext:
    return ServerContext(
        spec=RunSpec(strategy="moon", seed=seed, device="cpu"), num_classes=2, num_clients=4,
        device=torch.device("cpu"), build_model=Features, dataset=None, client_sizes=[2] * 4,
        client_label_counts=torch.zeros(4, 2, dtype=torch.long),
    )  # fmt: skip


def client(cid: int, round: int, global_weight) -> ClientContext:
    return ClientContext(
        client_id=cid, round=round, model=Features(global_weight),
        global_model=Features(global_weight).eval(), payload={}, data=None, num_classes=2,
        device=torch.device("cpu"), build_model=Features, preprocess=None,
    )  # fmt: skip


X = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]])
Z = torch.tensor([[1.0, 1.0, 0.0], [0.0, 2.0, -1.0]])  # the features of the model in training
LOGITS, Y = torch.tensor([[2.0, -1.0], [0.5, 0.5]]), torch.tensor([0, 1])
W_INIT = torch.eye(3)  # the initial global model: features = x
W_NOW = torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])  # a later global model
W_PREV = torch.tensor([[1.0, 0.0, 1.0], [0.0, -1.0, 0.0], [2.0, 0.0, 0.0]])  # a trained local


def batch() -> LocalBatch:
    return LocalBatch(X, Y, Z, LOGITS)


def ce() -> float:
    return F.cross_entropy(LOGITS, Y).item()


def contrastive_by_hand(pos: torch.Tensor, neg: torch.Tensor) -> float:
    """mean over samples of -log(e^{cos(z,p)/tau} / (e^{cos(z,p)/tau} + e^{cos(z,n)/tau})),
    in float64."""
    z, p, n = Z.double(), pos.double(), neg.double()
    cp = (z * p).sum(1) / (z.norm(dim=1) * p.norm(dim=1))
    cn = (z * n).sum(1) / (z.norm(dim=1) * n.norm(dim=1))
    return torch.log1p(torch.exp((cn - cp) / TAU)).mean().item()


def moon(rule: str, seed: int = 3) -> Moon:
    return Moon(MoonParams(mu=MU, tau=TAU, first_negative=rule), ctx(seed))


def loss(strategy: Moon, c: ClientContext) -> float:
    strategy.client_begin(c)
    return local_loss_on(strategy, c, batch()).item()


# ------------------------------------------------------------------------------ MOON
def test_the_default_is_the_fedgkd_code_no_negative():
    assert MoonParams().first_negative == "none"
    assert Moon.make_params({}, "cifar10", "resnet8").first_negative == "none"


def test_none_adds_no_term_on_a_first_participation_in_any_round():
    m = moon("none")
    assert loss(m, client(0, 0, W_INIT)) == pytest.approx(ce(), rel=1e-7)
    assert loss(m, client(1, 5, W_NOW)) == pytest.approx(ce(), rel=1e-7)


def test_global_contrasts_the_received_model_with_itself_a_constant_log2():
    m = moon("global")
    assert loss(m, client(1, 5, W_NOW)) == pytest.approx(ce() + MU * LN2, rel=1e-6)
    # the constant sends no gradient to the features at all (the contrastive term is a softplus
    # of the negative's cosine minus the positive's, exactly zero here), where another negative
    # sends one of order mu
    c = client(1, 5, W_NOW)
    m.client_begin(c)
    z = Z.clone().requires_grad_()
    local_loss_on(m, c, LocalBatch(X, Y, z, LOGITS)).backward()
    assert torch.count_nonzero(z.grad) == 0


def test_initial_contrasts_against_the_initial_global_model_and_survives_a_resume():
    m = moon("initial")
    # round 1 receives the initial model: positive and negative coincide
    assert loss(m, client(0, 0, W_INIT)) == pytest.approx(ce() + MU * LN2, rel=1e-6)
    # a client first sampled in round 4: the negative is still the initial model, not W_NOW
    expected = ce() + MU * contrastive_by_hand(X @ W_NOW.T, X @ W_INIT.T)
    assert loss(m, client(2, 3, W_NOW)) == pytest.approx(expected, rel=1e-6)
    assert expected != pytest.approx(ce() + MU * LN2, rel=1e-3)
    resumed = moon("initial")
    resumed.load_state_dict(m.state_dict())
    assert torch.equal(resumed.initial["proj.weight"], W_INIT)
    assert loss(resumed, client(3, 3, W_NOW)) == pytest.approx(expected, rel=1e-6)
    # a state without the initial model cannot give this negative: said, not guessed
    blank = moon("initial")
    with pytest.raises(RuntimeError, match="initial global model"):
        blank.client_begin(client(3, 3, W_NOW))


def own_init_weight(seed: int, cid: int) -> torch.Tensor:
    torch.manual_seed(derive_seed(seed, "moon-own-init", cid))
    return Features().proj.weight.detach().clone()


def test_own_init_has_no_negative_in_round_1_then_the_clients_own_initialisation():
    m = moon("own-init", seed=3)
    assert loss(m, client(0, 0, W_INIT)) == pytest.approx(ce(), rel=1e-7)
    c = client(1, 2, W_NOW)
    torch.manual_seed(123)  # the run's RNG, wherever it stands, does not decide the negative
    got = loss(m, c)
    c = client(1, 2, W_NOW)
    torch.manual_seed(456)
    assert loss(moon("own-init", seed=3), c) == pytest.approx(got, rel=1e-7)
    w1 = own_init_weight(3, 1)
    assert got == pytest.approx(ce() + MU * contrastive_by_hand(X @ W_NOW.T, X @ w1.T), rel=1e-6)
    # the same client gets the same initialisation; another client its own
    assert loss(moon("own-init", seed=3), client(1, 7, W_NOW)) == pytest.approx(got, rel=1e-7)
    assert not torch.equal(own_init_weight(3, 2), w1)
    assert loss(m, client(2, 2, W_NOW)) != pytest.approx(got, rel=1e-4)


@pytest.mark.parametrize("rule", ["none", "global", "initial", "own-init"])
def test_every_choice_contrasts_a_returning_client_with_its_previous_model(rule):
    m = moon(rule)
    m.client_begin(client(0, 0, W_INIT))  # round 1 (captures the initial model for "initial")
    first = client(1, 0, W_INIT)
    m.client_begin(first)
    with torch.no_grad():
        first.model.proj.weight.copy_(W_PREV)  # "local training"
    assert m.client_end(first) == {}
    expected = ce() + MU * contrastive_by_hand(X @ W_NOW.T, X @ W_PREV.T)
    assert loss(m, client(1, 4, W_NOW)) == pytest.approx(expected, rel=1e-6)


def test_an_unknown_choice_is_refused_by_the_spec_naming_the_choices():
    RunSpec(strategy="moon", params={"first_negative": "own-init"})
    with pytest.raises(SpecError) as err:
        RunSpec(strategy="moon", params={"first_negative": "previous"})
    msg = str(err.value)
    assert "params.first_negative='previous'" in msg
    assert all(c in msg for c in ("none", "global", "initial", "own-init"))


# ------------------------------------------------------------------------------ FedNTD
def sigmoid(v: float) -> float:
    return 1.0 / (1.0 + math.exp(-v))


STUDENT, TEACHER, Y0 = (
    torch.tensor([[1.0, 2.0, 3.0]]),
    torch.tensor([[3.0, 1.0, 0.0]]),
    torch.tensor([0]),
)


def test_tau_squared_multiplies_the_not_true_kl_by_tau_squared():
    # y = 0: not-true student logits (2, 3), teacher (1, 0); at tau 2 the KL is
    # (s(.5) - s(-.5)) * 0.5 with s the logistic function (test_strategy_distill.py)
    plain = (sigmoid(0.5) - sigmoid(-0.5)) * 0.5
    assert not_true_kl(STUDENT, TEACHER, Y0, tau=2.0).item() == pytest.approx(plain, rel=1e-6)
    got = not_true_kl(STUDENT, TEACHER, Y0, tau=2.0, tau_squared=True).item()
    assert got == pytest.approx(4 * plain, rel=1e-6)
    # at the papers' tau = 1 the two agree
    assert not_true_kl(STUDENT, TEACHER, Y0, 1.0, True).item() == pytest.approx(
        not_true_kl(STUDENT, TEACHER, Y0, 1.0).item(), rel=1e-7
    )


def test_tau_squared_scales_the_gradient_and_reaches_the_local_loss():
    grads = []
    for squared in (False, True):
        s = STUDENT.clone().requires_grad_()
        not_true_kl(s, TEACHER, Y0, 3.0, squared).backward()
        grads.append(s.grad)
    assert torch.allclose(grads[1], 9 * grads[0], rtol=1e-6)

    class Teacher(nn.Module):
        def features_and_logits(self, x):
            return x, TEACHER.expand(x.shape[0], -1)

    c = ClientContext(
        client_id=0, round=0, model=None, global_model=Teacher(), payload={}, data=None,
        num_classes=3, device=torch.device("cpu"), build_model=None, preprocess=None,
    )  # fmt: skip
    b = LocalBatch(torch.zeros(1, 4), Y0, None, STUDENT)
    for squared, factor in ((False, 1.0), (True, 4.0)):
        strategy = FedNTD(FedNTDParams(beta=0.7, tau=2.0, tau_squared=squared), ctx=None)
        c.declared = type(c.declared)()
        strategy.client_begin(c)
        expected = F.cross_entropy(STUDENT, Y0) + 0.7 * factor * not_true_kl(
            STUDENT, TEACHER, Y0, 2.0
        )
        assert local_loss_on(strategy, c, b).item() == pytest.approx(expected.item(), rel=1e-6)


def test_tau_squared_defaults_to_the_paper_and_is_type_checked():
    assert FedNTDParams().tau_squared is False
    assert RunSpec(strategy="fedntd", params={"tau_squared": True}).params == {"tau_squared": True}
    with pytest.raises(SpecError, match=r"params.tau_squared='yes' must be true or false"):
        RunSpec(strategy="fedntd", params={"tau_squared": "yes"})


# ------------------------------------------------------------------------------ captions
def test_a_caption_names_a_choice_only_where_it_departs_from_the_default():
    import json

    import pandas as pd

    from fedkd.report.setting import setting_sentence

    def runs(moon_rule, ntd_squared, m1_teacher="current", target="global"):
        rows = [
            ("a", "moon", {"mu": 5.0, "tau": 0.5, "first_negative": moon_rule}),
            ("b", "fedntd", {"beta": 1.0, "tau": 1.0, "tau_squared": ntd_squared}),
            ("c", "fedavg", {}),
            ("d", "fedgkd", {"buffer": 1, "m1_teacher": m1_teacher}),
            ("e", "feddistill+", {"coef": 0.1, "target": target}),
        ]
        return pd.DataFrame(
            [{"run": r, "strategy": s, "params": json.dumps(p), "clients": 10} for r, s, p in rows]
        )

    default = setting_sentence(runs("none", False))
    assert not any(k in default for k in ("first_negative", "tau_squared", "m1_teacher", "target"))
    text = setting_sentence(runs("own-init", True, "initial", "uniform"))
    assert "fedntd with tau_squared true" in text and "moon with first_negative own-init" in text
    assert "fedgkd with m1_teacher initial" in text and "feddistill+ with target uniform" in text


# ------------------------------------------------------------------------------ in a run
@pytest.mark.slow
@pytest.mark.parametrize("rule", ["initial", "own-init"])
def test_a_run_with_a_stored_negative_resumes_to_the_same_numbers(tmp_path, rule):
    """Clients first sampled after round 1 take their negative from the strategy's state (the
    initial model) or from the seed (their own initialisation), so a run stopped after round 1
    and resumed ends as an uninterrupted one."""
    import pandas as pd

    from fedkd.data.base import ArraySplit, FedDataset
    from fedkd.engine.run import Run

    g = torch.Generator().manual_seed(0)

    def split(n):
        x = torch.randint(0, 256, (n, 1, 28, 28), generator=g, dtype=torch.uint8)
        return ArraySplit(x, torch.arange(n) % 2)

    data = FedDataset("mnist5k", "image", 2, split(128), split(16), split(32), (0.5,), (0.5,))
    spec = RunSpec(
        dataset="mnist5k", strategy="moon", clients=4, participation=0.5, rounds=3,
        local_epochs=1, batch_size=32, device="cpu", engine="sequential",
        model_options={"channels": [4, 8], "hidden": 16}, params={"first_negative": rule},
    )  # fmt: skip
    from fedkd.runtime.seeding import sample_clients

    # client 1 is first sampled in round 2, after the cut: its negative comes from the resume
    assert [sample_clients(0, r, 4, 0.5) for r in range(2)] == [[0, 3], [1, 3]]
    quiet = lambda m: None  # noqa: E731
    Run(spec, tmp_path / "whole", dataset=data, log=quiet).run()
    Run(spec, tmp_path / "cut", dataset=data, log=quiet).run(stop_after_round=1)
    Run(spec, tmp_path / "cut", dataset=data, log=quiet).run()
    whole = pd.read_parquet(tmp_path / "whole" / "metrics.parquet")
    cut = pd.read_parquet(tmp_path / "cut" / "metrics.parquet")
    assert whole["test_loss"].tolist() == cut["test_loss"].tolist()
    assert whole["train_loss"].tolist() == cut["train_loss"].tolist()


def test_a_model_name_is_either_shared_or_own():
    """ctx.outputs holds one model's outputs per name: declared both ways, the sequential
    trainer gave the own model's and the batched trainer the shared one's (a moon that also
    declared own_model("global") trained differently per engine). Refused either way round."""

    def fresh():
        return ClientContext(
            client_id=0, round=0, model=None, global_model=None, payload={}, data=None,
            num_classes=3, device=torch.device("cpu"), build_model=None, preprocess=None,
        )  # fmt: skip

    c = fresh()
    c.share_model("global", nn.Linear(2, 2))
    with pytest.raises(ValueError, match="model 'global' is already declared with share_model"):
        c.own_model("global", {})
    c = fresh()
    c.own_model("prev", {})
    with pytest.raises(ValueError, match="model 'prev' is already declared with own_model"):
        c.share_model("prev", nn.Linear(2, 2))
    c.share_model("teacher", nn.Linear(2, 2))  # other names: as before
    assert set(c.declared.own_models) == {"prev"} and set(c.declared.shared_models) == {"teacher"}


def test_a_shared_model_with_batchnorm_in_training_mode_is_refused():
    """Its statistics would move with the batches it sees: per client, one after another, in
    the sequential trainer; once for the stacked batches in the batched one (which runs shared
    models in eval mode). Eval mode, or no BatchNorm, is accepted."""
    c = ClientContext(
        client_id=0, round=0, model=None, global_model=None, payload={}, data=None,
        num_classes=3, device=torch.device("cpu"), build_model=None, preprocess=None,
    )  # fmt: skip
    with_bn = nn.Sequential(nn.Conv2d(1, 2, 1), nn.BatchNorm2d(2))
    with pytest.raises(ValueError, match=r"share_model\('teacher'\) got a model in training mode"):
        c.share_model("teacher", with_bn.train())
    c.share_model("teacher", with_bn.eval())
    c.share_model("head", nn.Linear(2, 2).train())
    assert set(c.declared.shared_models) == {"teacher", "head"}


def test_each_strategy_declares_its_published_code_choices_beside_its_params():
    """The choices a caption names are the strategy class's code_choices, whose defaults are
    its Params defaults (the registry refuses a strategy where they differ), and the report reads
    them from the module's source without importing it."""
    from fedkd.report.declared import declared_strategies
    from fedkd.strategies import get_strategy_class, strategy_names

    declared = declared_strategies()
    choices = {}
    for name in strategy_names():
        cls = get_strategy_class(name)
        assert declared[name].code_choices == cls.code_choices, name
        for key, default in cls.code_choices.items():
            assert getattr(cls.Params(), key) == default, f"{name}.{key}"
        if cls.code_choices:
            choices[name] = sorted(cls.code_choices)
    assert choices == {
        "feddistill+": ["target"], "fedgen": ["label_counts", "round_index", "teacher_weighting"],
        "fedgkd": ["m1_teacher"], "fedgkd+": ["m1_teacher"], "fedntd": ["tau_squared"],
        "moon": ["first_negative"],
    }  # fmt: skip


def test_the_setting_sentence_does_not_import_torch():
    """A caption names a run's choices without loading the strategies (a render job starts
    without torch)."""
    import subprocess
    import sys

    code = (
        "import json, sys; import pandas as pd; from fedkd.report.setting import setting_sentence;"
        "df = pd.DataFrame([{'run': 'a', 'strategy': 'moon', 'clients': 10,"
        " 'params': json.dumps({'first_negative': 'global'})}]);"
        "print(setting_sentence(df)); print('torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert "moon with first_negative global" in out[0] and out[1] == "False", out
