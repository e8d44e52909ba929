"""fedgkd, fedgkd (mse), fedgkd-vote and fedgkd+: loss terms by hand, the model buffer, the vote
weights, and short real runs (accuracy, resume, gamma = 0 == fedavg, bytes sent)."""

import math
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedkd.config import RunSpec
from fedkd.data.base import ArraySplit
from fedkd.engine.run import Run
from fedkd.engine.sequential import local_loss_on
from fedkd.models.base import FedModel
from fedkd.strategies import get_strategy_class
from fedkd.strategies._buffer import ModelBuffer
from fedkd.strategies.base import ClientContext, LocalBatch, ServerContext
from fedkd.strategies.fedgkd import FedGKD, gkd_regularizer, logit_mse
from fedkd.strategies.fedgkd_plus import FedGKDPlus
from fedkd.strategies.fedgkd_vote import FedGKDVote, vote_weights

# ---------------------------------------------------------------------------- tiny pieces


class Tiny(FedModel):
    """4 inputs -> 3 features -> 2 classes."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 3)
        self._attach_head(3, 2, projection_head=False)

    def backbone_features(self, x):
        return self.body(x)


class FixedTeacher(nn.Module):
    """A teacher whose logits are given, whatever the input."""

    def __init__(self, logits):
        super().__init__()
        self.logits = logits

    def features_and_logits(self, x):
        return x, self.logits


def tiny_model(fill: float) -> Tiny:
    m = Tiny()
    with torch.no_grad():
        for p in m.parameters():
            p.fill_(fill)
    return m


def server_ctx(val: ArraySplit | None = None) -> ServerContext:
    dataset = SimpleNamespace(
        kind="text",  # the preprocessor passes text inputs through unchanged
        input_shape=(4,),
        val=val if val is not None else ArraySplit(torch.zeros(3, 4), torch.zeros(3).long()),
    )
    return ServerContext(
        spec=RunSpec(device="cpu"), num_classes=2, num_clients=2, device=torch.device("cpu"),
        build_model=Tiny, dataset=dataset, client_sizes=[3, 3],
        client_label_counts=torch.ones(2, 2, dtype=torch.long),
    )  # fmt: skip


def client_ctx(round: int, payload: dict, global_model=None) -> ClientContext:
    return ClientContext(
        client_id=0, round=round, model=Tiny(), global_model=global_model, payload=payload,
        data=None, num_classes=2, device=torch.device("cpu"), build_model=Tiny,
        preprocess=lambda x, train: x,
    )  # fmt: skip


def kl_by_hand(p_teacher, p_student):
    return sum(p * math.log(p / q) for p, q in zip(p_teacher, p_student, strict=True))


# ---------------------------------------------------------------------------- loss terms


def test_kl_regulariser_by_hand():
    # teacher softmax([0, ln 3]) = (1/4, 3/4), student softmax([0, 0]) = (1/2, 1/2)
    teacher = torch.tensor([[0.0, math.log(3.0)], [0.0, 0.0]])
    student = torch.tensor([[0.0, 0.0], [0.0, math.log(3.0)]])
    row1 = kl_by_hand([0.25, 0.75], [0.5, 0.5])
    row2 = kl_by_hand([0.5, 0.5], [0.25, 0.75])
    got = gkd_regularizer(student, teacher, "kl").item()
    assert got == pytest.approx((row1 + row2) / 2, rel=1e-6)  # batch mean


def test_mse_regulariser_by_hand():
    student = torch.tensor([[1.0, 2.0], [0.0, -1.0]])
    teacher = torch.tensor([[0.0, 0.0], [3.0, 1.0]])
    # squared differences 1, 4, 9, 4: mean over batch and classes = 18 / 4
    assert logit_mse(student, teacher).item() == pytest.approx(4.5)
    assert gkd_regularizer(student, teacher, "mse").item() == pytest.approx(4.5)
    s = student.clone().requires_grad_(True)
    t = teacher.clone().requires_grad_(True)
    logit_mse(s, t).backward()
    assert t.grad is None  # the teacher is a constant
    assert torch.allclose(s.grad, 2 * (student - teacher) / 4)


def test_unknown_regulariser_is_refused():
    with pytest.raises(ValueError, match="regularizer"):
        gkd_regularizer(torch.zeros(1, 2), torch.zeros(1, 2), "l1")
    with pytest.raises(ValueError, match="regularizer"):
        FedGKD.make_params({"regularizer": "l1"}, "mnist5k", "cnn")
    assert FedGKD.param_errors({"mu": 1.0})  # unknown keys are rejected


def _batch():
    logits = torch.tensor([[0.0, 0.0], [1.0, -1.0]], requires_grad=True)
    y = torch.tensor([1, 0])
    return LocalBatch(x=torch.zeros(2, 4), y=y, features=torch.zeros(2, 3), logits=logits), y


@pytest.mark.parametrize("regularizer", ["kl", "mse"])
def test_fedgkd_local_loss_is_ce_plus_half_gamma_times_regulariser(regularizer):
    params = FedGKD.make_params({"gamma": 0.2, "regularizer": regularizer}, "mnist5k", "cnn")
    strategy = FedGKD(params, server_ctx())
    batch, y = _batch()
    teacher_logits = torch.tensor([[0.0, math.log(3.0)], [0.0, 0.0]])
    client = client_ctx(1, {}, global_model=FixedTeacher(teacher_logits))
    strategy.client_begin(client)
    ce = (math.log(2.0) + (math.log(1 + math.exp(-2.0)))) / 2  # CE of [0,0]->1 and [1,-1]->0
    if regularizer == "kl":
        z = math.exp(1) + math.exp(-1)
        p2 = [math.exp(1) / z, math.exp(-1) / z]
        reg = (kl_by_hand([0.25, 0.75], [0.5, 0.5]) + kl_by_hand([0.5, 0.5], p2)) / 2
    else:
        reg = (0 + math.log(3.0) ** 2 + 1 + 1) / 4
    assert F.cross_entropy(batch.logits, y).item() == pytest.approx(ce)
    assert local_loss_on(strategy, client, batch).item() == pytest.approx(ce + 0.1 * reg, rel=1e-6)


def test_fedgkd_no_distillation_in_first_round_or_with_gamma_zero():
    batch, _ = _batch()
    teacher = FixedTeacher(torch.tensor([[5.0, 0.0], [5.0, 0.0]]))
    for gamma, round in [(0.2, 0), (0.0, 3)]:
        strategy = FedGKD(FedGKD.make_params({"gamma": gamma}, "mnist5k", "cnn"), server_ctx())
        client = client_ctx(round, {}, global_model=teacher)
        strategy.client_begin(client)
        assert "teacher" not in client.declared.shared_models
        # exactly the CE tensor: no zero-weighted term that could change floating point
        assert torch.equal(local_loss_on(strategy, client, batch), batch.ce())


# ---------------------------------------------------------------------------- model buffer


def test_buffer_is_fifo_and_clones():
    buf = ModelBuffer(2)
    w = torch.tensor([1.0])
    buf.push({"w": w}, {"i": 0})
    w.add_(10.0)  # the source changing later must not change the buffered copy
    buf.push({"w": torch.tensor([2.0])}, {"i": 1})
    buf.push({"w": torch.tensor([3.0])}, {"i": 2})
    assert len(buf) == 2
    assert [s["w"].item() for s in buf.states] == [2.0, 3.0]  # oldest dropped first
    assert [i["i"] for i in buf.infos] == [1, 2]
    with pytest.raises(ValueError, match="buffer size must be at least 1, got 0"):
        ModelBuffer(0)


def test_buffer_mean_by_hand_and_round_trip():
    buf = ModelBuffer(3)
    buf.push({"w": torch.tensor([1.0, 2.0]), "n": torch.tensor(7)})
    buf.push({"w": torch.tensor([3.0, 6.0]), "n": torch.tensor(9)})
    buf.push({"w": torch.tensor([5.0, 1.0]), "n": torch.tensor(4)})
    mean = buf.mean()
    assert torch.equal(mean["w"], torch.tensor([3.0, 3.0]))  # (1+3+5)/3, (2+6+1)/3
    assert mean["n"].item() == 7  # integer buffers are not averaged
    other = ModelBuffer(3)
    other.load_state_dict(buf.state_dict(), torch.device("cpu"))
    assert all(torch.equal(a["w"], b["w"]) for a, b in zip(buf.states, other.states, strict=True))


def test_fedgkd_teacher_is_the_average_of_the_last_m_global_models():
    strategy = FedGKD(FedGKD.make_params({"buffer": 2}, "mnist5k", "cnn"), server_ctx())
    m0, m1, m2 = tiny_model(1.0), tiny_model(2.0), tiny_model(4.0)
    assert strategy.payload(0, m0) == {}  # first round: no teacher sent
    assert len(strategy.buffer) == 0  # the random initial model is never a teacher
    strategy.server_update(0, m1, [])
    assert len(strategy.buffer) == 1
    assert strategy.payload(1, m1) == {}  # one buffered model: the teacher is the global model
    strategy.server_update(1, m2, [])
    teacher = strategy.payload(2, m2)["teacher"]
    assert torch.allclose(teacher["classifier.bias"], torch.full((2,), 3.0))  # (w_1 + w_2) / 2
    # the client builds the teacher once per round and shares it between clients
    c1, c2 = client_ctx(2, {"teacher": teacher}), client_ctx(2, {"teacher": teacher})
    strategy.client_begin(c1)
    strategy.client_begin(c2)
    t = c1.declared.shared_models["teacher"]
    assert t is c2.declared.shared_models["teacher"] and not t.training
    assert not any(p.requires_grad for p in t.parameters())
    assert torch.allclose(t.body.weight, torch.full((3, 4), 3.0))
    c3 = client_ctx(3, {"teacher": teacher})
    strategy.client_begin(c3)
    assert c3.declared.shared_models["teacher"] is not t  # a new round builds a new one


def test_fedgkd_with_one_model_sends_nothing_and_distils_the_global_model():
    strategy = FedGKD(FedGKD.make_params({"buffer": 1}, "mnist5k", "cnn"), server_ctx())
    m0, m1 = tiny_model(1.0), tiny_model(2.0)
    strategy.payload(0, m0)
    strategy.server_update(0, m1, [])
    assert strategy.payload(1, m1) == {}
    assert len(strategy.buffer) == 1
    client = client_ctx(1, {}, global_model=m1)
    strategy.client_begin(client)
    assert client.declared.shared_models["teacher"] is m1


def test_fedgkd_m1_released_teacher_stays_the_initial_model():
    params = FedGKD.make_params({"buffer": 1, "m1_teacher": "initial"}, "mnist5k", "cnn")
    strategy = FedGKD(params, server_ctx())
    m0, m1, m2 = tiny_model(1.0), tiny_model(2.0), tiny_model(4.0)
    with torch.no_grad():
        m0.classifier.bias.copy_(torch.tensor([2.0, -1.0]))  # w_0's outputs differ from w_t's
    assert strategy.payload(0, m0) == {}  # w_0 kept, nothing sent
    first = client_ctx(0, {}, global_model=m0)
    strategy.client_begin(first)
    assert "teacher" not in first.declared.shared_models  # no distillation in the first round
    for round, (aggregated, received) in enumerate([(m1, m1), (m2, m2)], start=1):
        strategy.server_update(round - 1, aggregated, [])
        assert strategy.payload(round, received) == {}  # the worker keeps w_0 locally
        client = client_ctx(round, {}, global_model=received)
        strategy.client_begin(client)
        teacher = client.declared.shared_models["teacher"]
        assert teacher is not received and not teacher.training
        assert torch.equal(teacher.body.weight, m0.body.weight)  # w_0, not w_t
    batch, _ = _batch()
    expected = batch.ce() + 0.1 * gkd_regularizer(batch.logits, m0(batch.x))
    assert local_loss_on(strategy, client, batch).item() == pytest.approx(expected.item(), rel=1e-6)
    toward_current = batch.ce() + 0.1 * gkd_regularizer(batch.logits, m2(batch.x))
    assert expected.item() != pytest.approx(toward_current.item(), rel=1e-3)
    # the default follows the paper: the received global model
    paper = FedGKD(FedGKD.make_params({"buffer": 1}, "mnist5k", "cnn"), server_ctx())
    paper.payload(0, m0)
    paper.server_update(0, m1, [])
    client = client_ctx(1, {}, global_model=m1)
    paper.client_begin(client)
    assert client.declared.shared_models["teacher"] is m1
    # w_0 survives a checkpoint
    restored = FedGKD(params, server_ctx())
    restored.load_state_dict(strategy.state_dict())
    assert torch.equal(restored.initial_state["body.weight"], m0.body.weight)
    assert "initial_state" not in paper.state_dict()


def test_fedgkd_m1_teacher_is_checked():
    with pytest.raises(ValueError, match="m1_teacher='initial' applies to buffer 1.*buffer=5"):
        FedGKD.make_params({"m1_teacher": "initial"}, "cifar10", "resnet8")
    with pytest.raises(ValueError, match="m1_teacher='first'"):
        FedGKD.make_params({"buffer": 1, "m1_teacher": "first"}, "cifar10", "resnet8")


# ---------------------------------------------------------------------------- vote


def test_vote_weights_by_hand():
    # L = [1, 2], M = 2, beta = 1/2: 0.1 * softmax([-2, -4])
    w = vote_weights([1.0, 2.0], lam=0.1, beta=0.5)
    e = math.exp(-2.0)
    assert w == pytest.approx([0.1 / (1 + e), 0.1 * e / (1 + e)], rel=1e-12)
    assert sum(w) == pytest.approx(0.1)
    assert vote_weights([0.7], lam=0.1, beta=1.0) == pytest.approx([0.1])


def test_vote_payload_losses_weights_and_local_loss_by_hand():
    x = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0]])
    y = torch.tensor([0, 1, 1])
    val = ArraySplit(x, y)
    params = FedGKDVote.make_params({"buffer": 2}, "mnist5k", "cnn")
    assert params.beta is None and params.lam == 0.1
    strategy = FedGKDVote(params, server_ctx(val))
    assert strategy.beta == 0.5  # 1/M
    torch.manual_seed(0)
    m0, m1, m2 = Tiny(), Tiny(), Tiny()

    def val_loss(m):
        with torch.no_grad():
            return F.cross_entropy(m(x), y).item()

    assert strategy.payload(0, m0) == {}  # first round: nothing sent, nothing distilled
    strategy.server_update(0, m1, [])
    strategy.payload(1, m1)
    out = strategy.server_update(1, m2, [])
    losses = [val_loss(m1)]  # round 2 votes over w_1 alone: w_0 is never buffered
    assert out["vote_val_losses"] == pytest.approx(losses, rel=1e-6)
    assert out["vote_weights"] == pytest.approx(vote_weights(losses, 0.1, 0.5))

    payload = strategy.payload(2, m2)  # buffer (M = 2) now holds w_1, w_2
    losses = [val_loss(m2), val_loss(m1)]
    assert payload["weights"] == pytest.approx(vote_weights(losses, 0.1, 0.5), rel=1e-6)
    assert len(payload["teachers"]) == 1  # the current model is sent as the global weights
    assert torch.equal(payload["teachers"][0]["body.weight"], m1.body.weight)

    client = client_ctx(2, payload, global_model=m2)
    strategy.client_begin(client)
    batch, by = _batch()
    xb = torch.tensor([[0.5, -1.0, 2.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    batch.x = xb
    expected = F.cross_entropy(batch.logits, by)
    for w, m in zip(payload["weights"], [m2, m1], strict=True):
        with torch.no_grad():
            p_t = F.softmax(m(xb), dim=1)
        log_p_s = F.log_softmax(batch.logits, dim=1)
        expected = expected + w * (p_t * (p_t.log() - log_p_s)).sum(1).mean()
    assert local_loss_on(strategy, client, batch).item() == pytest.approx(expected.item(), rel=1e-6)


def test_vote_needs_a_validation_split():
    empty = ArraySplit(torch.zeros(0, 4), torch.zeros(0).long())
    with pytest.raises(ValueError, match="validation"):
        FedGKDVote(FedGKDVote.make_params({}, "mnist5k", "cnn"), server_ctx(empty))


# ---------------------------------------------------------------------------- registry, defaults


def test_registered_traits_and_defaults():
    assert get_strategy_class("fedgkd") is FedGKD
    assert get_strategy_class("fedgkd-vote") is FedGKDVote
    assert get_strategy_class("fedgkd+") is FedGKDPlus
    for cls in (FedGKD, FedGKDVote):
        assert cls.traits.extra_information == "none"
        assert not cls.traits.proxy_data and not cls.traits.modifies_model
        assert not cls.uses_projection_head
    assert FedGKDPlus.uses_projection_head and FedGKDPlus.traits.modifies_model
    assert issubclass(FedGKDPlus, FedGKD)

    p = FedGKD.make_params({}, "cifar10", "resnet8")
    assert (p.gamma, p.buffer, p.regularizer, p.temperature) == (0.2, 5, "kl", 1.0)
    assert FedGKD.make_params({}, "tinyimagenet", "resnet50").gamma == 0.1
    nlp = FedGKD.make_params({}, "sst5", "distilbert")
    assert (nlp.gamma, nlp.buffer) == (0.2, 1)
    assert FedGKDPlus.make_params({}, "cifar10", "resnet8") == p
    assert FedGKDVote.make_params({}, "cifar10", "resnet8").buffer == 5
    assert FedGKDVote.make_params({}, "agnews", "distilbert").buffer == 3
    assert FedGKD.make_params({"buffer": 3}, "cifar10", "resnet8").buffer == 3  # user wins
    # text vs image comes from the dataset's kind: every text set, the generated one included
    for text in ("agnews", "sst5", "synthtext"):
        assert FedGKD.make_params({}, text, "distilbert").buffer == 1
        assert FedGKDVote.make_params({}, text, "distilbert").buffer == 3
    for image in ("cifar100", "mnist", "mnist5k"):
        assert FedGKD.make_params({}, image, "auto").buffer == 5
    assert p.m1_teacher == "current"  # the paper's M = 1 teacher


# ---------------------------------------------------------------------------- real runs

# two clients of 720 samples a round (the baselines' setting): with 360-sample clients the
# projection-head model of fedgkd+ is still at chance after 3 rounds
SMALL = dict(
    dataset="mnist5k", clients=5, participation=0.4, alpha=1.0, local_epochs=1, rounds=3,
    device="cpu",
)  # fmt: skip
EXACT = ["round", "test_acc", "test_loss", "train_loss", "bytes_sent", "bytes_received"]


def run(tmp, name, strategy, params=None, stop=None):
    spec = RunSpec(strategy=strategy, params=params or {}, **SMALL)
    out = tmp / name
    Run(spec, out, log=lambda msg: None).run(stop_after_round=stop)
    return pd.read_parquet(out / "metrics.parquet")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Runs shared by several tests (each is a few seconds on a quiet CPU)."""
    tmp = tmp_path_factory.mktemp("fedgkd")
    return {
        "fedavg": run(tmp, "fedavg", "fedavg"),
        "fedgkd": run(tmp, "fedgkd", "fedgkd", {"buffer": 3}),
        "vote": run(tmp, "vote", "fedgkd-vote", {"buffer": 3}),
        "tmp": tmp,
    }


def improves(df):
    return df["test_acc"].iloc[-1] > df["test_acc"].iloc[0]


@pytest.mark.slow
def test_fedgkd_and_vote_learn_and_send_the_right_bytes(runs):
    avg, gkd, vote = runs["fedavg"], runs["fedgkd"], runs["vote"]
    assert list(gkd["round"]) == [1, 2, 3] and improves(gkd) and improves(vote)
    # the first round distils nothing, so it is FedAvg's round exactly
    for df in (gkd, vote):
        pd.testing.assert_frame_equal(df[EXACT].iloc[:1], avg[EXACT].iloc[:1])
    one = avg["bytes_sent"].iloc[0]
    assert (avg["bytes_sent"] == one).all()
    # fedgkd, M = 3: w_t and w̄_t once the buffer holds two models (round 3); before that the
    # teacher is absent (round 1) or is the global model itself (round 2)
    assert list(gkd["bytes_sent"]) == [one, one, 2 * one]
    # vote, M = 3: every buffered model; the buffer holds w_1 in round 2 and w_1, w_2 in round 3
    assert list(vote["bytes_sent"]) == [one, one, 2 * one]
    assert list(gkd["bytes_received"]) == list(avg["bytes_received"])


@pytest.mark.slow
def test_vote_records_the_weights_of_each_round(runs):
    vote = runs["vote"]
    weights = vote["server_vote_weights"].map(list).tolist()
    losses = vote["server_vote_val_losses"].map(list).tolist()
    # no distillation (and an empty buffer) in the first round, then one model more a round
    assert [len(w) for w in weights] == [0, 1, 2] and [len(v) for v in losses] == [0, 1, 2]
    for w, v in zip(weights[1:], losses[1:], strict=True):
        assert w == pytest.approx(vote_weights(v, 0.1, 1 / 3))
        assert sum(w) == pytest.approx(0.1)
    # newest first: round 3's list is round 2's with the newest model in front
    assert losses[2][1:] == losses[1]


@pytest.mark.slow
@pytest.mark.parametrize("strategy,key", [("fedgkd", "fedgkd"), ("fedgkd-vote", "vote")])
def test_resume_is_bit_identical(runs, strategy, key):
    params = {"buffer": 3}
    run(runs["tmp"], f"{key}-cut", strategy, params, stop=1)
    cut = run(runs["tmp"], f"{key}-cut", strategy, params)
    full = runs[key]
    pd.testing.assert_frame_equal(full[EXACT], cut[EXACT])
    assert full["class_acc"].map(list).tolist() == cut["class_acc"].map(list).tolist()
    if key == "vote":
        for col in ("server_vote_weights", "server_vote_val_losses"):
            assert full[col].map(list).tolist() == cut[col].map(list).tolist()


@pytest.mark.slow
def test_gamma_zero_is_exactly_fedavg(runs):
    zero = run(runs["tmp"], "gamma0", "fedgkd", {"gamma": 0.0, "buffer": 3}, stop=2)
    pd.testing.assert_frame_equal(zero[EXACT], runs["fedavg"][EXACT].iloc[:2])
    # ... and the regulariser does change training when gamma > 0
    assert runs["fedgkd"]["train_loss"].iloc[1] != runs["fedavg"]["train_loss"].iloc[1]


@pytest.mark.slow
def test_fedgkd_mse_with_one_model_learns_at_fedavg_cost(runs):
    mse = run(runs["tmp"], "mse", "fedgkd", {"regularizer": "mse", "buffer": 1})
    assert improves(mse)
    assert list(mse["bytes_sent"]) == list(runs["fedavg"]["bytes_sent"])
    assert mse["train_loss"].iloc[1] != runs["fedavg"]["train_loss"].iloc[1]


@pytest.mark.slow
def test_fedgkd_plus_learns_with_the_projection_head(runs):
    plus = run(runs["tmp"], "plus", "fedgkd+")
    assert improves(plus)
    # a bigger model than fedavg's (the head), and w̄_t sent beside w_t once two models are
    # buffered (round 3; M = 5)
    one = plus["bytes_sent"].iloc[0]
    assert one > runs["fedavg"]["bytes_sent"].iloc[0]
    assert list(plus["bytes_sent"]) == [one, one, 2 * one]
