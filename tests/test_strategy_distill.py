"""fedntd, fedlsd, fedcad and feddf: loss terms by hand, FedCAD's class weights, FedDF's server
distillation (early stopping, best model, data sources) and short real runs (accuracy, resume,
max_steps = 0 == fedavg)."""

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
from fedkd.runtime.seeding import derive_seed
from fedkd.strategies import get_strategy_class
from fedkd.strategies._selfdistill import self_distill_loss
from fedkd.strategies.base import (
    ClientContext,
    ClientUpdate,
    LocalBatch,
    LocalContext,
    ServerContext,
)
from fedkd.strategies.fedcad import FedCAD, FedCADParams, class_adaptive_weights
from fedkd.strategies.feddf import FedDF, FedDFParams, avg_logits_kl, noise_images
from fedkd.strategies.fedlsd import FedLSD, FedLSDParams
from fedkd.strategies.fedntd import FedNTD, FedNTDParams, not_true_kl, not_true_logits

# ---------------------------------------------------------------------------- tiny pieces


class Lin(FedModel):
    """Float vectors of size 4 -> 2 classes through one hidden linear layer."""

    def __init__(self, classes: int = 2):
        super().__init__()
        self.body = nn.Linear(4, 3)
        self._attach_head(3, classes, projection_head=False)

    def backbone_features(self, x):
        return self.body(x)


class ConstantTeacher(nn.Module):
    """Returns the same logits for every input row."""

    def __init__(self, logits):
        super().__init__()
        self.logits = torch.as_tensor(logits, dtype=torch.float32)

    def features_and_logits(self, x):
        return x, self.logits.expand(x.shape[0], -1)


def client(global_model, data=None, classes=2) -> ClientContext:
    return ClientContext(
        client_id=0, round=0, model=None, global_model=global_model, payload={}, data=data,
        num_classes=classes, device=torch.device("cpu"), build_model=None,
        preprocess=lambda x, train: x.float(),
    )  # fmt: skip


def sigmoid(v: float) -> float:
    return 1.0 / (1.0 + math.exp(-v))


# ---------------------------------------------------------------------------- fedntd


def test_not_true_kl_by_hand():
    # y = 0: not-true student logits (2, 3), teacher (1, 0); their softmaxes are (s(-1), s(1))
    # and (s(1), s(-1)) with s the logistic function, and log-ratios are +-1 (tau = 1)
    student = torch.tensor([[1.0, 2.0, 3.0]])
    teacher = torch.tensor([[3.0, 1.0, 0.0]])
    y = torch.tensor([0])
    expected = sigmoid(1) * 1 + sigmoid(-1) * -1
    assert not_true_kl(student, teacher, y).item() == pytest.approx(expected, rel=1e-6)
    # tau = 2, and no tau^2 factor: (s(.5) - s(-.5)) * 0.5
    expected_t2 = (sigmoid(0.5) - sigmoid(-0.5)) * 0.5
    assert not_true_kl(student, teacher, y, tau=2.0).item() == pytest.approx(expected_t2, rel=1e-6)
    # batch mean over samples (the second one has identical not-true logits: KL 0)
    s2 = torch.cat([student, torch.tensor([[5.0, 1.0, 1.0]])])
    t2 = torch.cat([teacher, torch.tensor([[-4.0, 2.0, 2.0]])])
    assert not_true_kl(s2, t2, torch.tensor([0, 0])).item() == pytest.approx(expected / 2, rel=1e-6)


def test_not_true_kl_ignores_the_true_class():
    torch.manual_seed(0)
    s, t = torch.randn(6, 5), torch.randn(6, 5)
    y = torch.tensor([0, 1, 2, 3, 4, 2])
    base = not_true_kl(s, t, y, tau=1.5)
    rows = torch.arange(6)
    s2, t2 = s.clone(), t.clone()
    s2[rows, y] += 7.0
    t2[rows, y] -= 11.0
    assert torch.allclose(not_true_kl(s2, t, y, 1.5), base, atol=1e-6)
    assert torch.allclose(not_true_kl(s, t2, y, 1.5), base, atol=1e-6)
    # ...while any not-true logit does matter
    s3 = s.clone()
    s3[0, 1] += 3.0
    assert not torch.allclose(not_true_kl(s3, t, y, 1.5), base)
    # and the term sends no gradient to the true-class logit nor to the teacher
    s_req, t_req = s.clone().requires_grad_(), t.clone().requires_grad_()
    not_true_kl(s_req, t_req, y).backward()
    assert torch.all(s_req.grad[rows, y] == 0)
    assert s_req.grad.abs().sum() > 0
    assert t_req.grad is None


def test_not_true_logits_keeps_order():
    logits = torch.tensor([[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]])
    out = not_true_logits(logits, torch.tensor([2, 0]))
    assert out.tolist() == [[0.0, 1.0, 3.0], [5.0, 6.0, 7.0]]


def test_fedntd_local_loss_is_ce_plus_beta_ntd():
    strategy = FedNTD(FedNTDParams(beta=0.7, tau=2.0), ctx=None)
    teacher_logits = torch.tensor([[3.0, 1.0, 0.0]])
    logits = torch.tensor([[1.0, 2.0, 3.0]])
    y = torch.tensor([1])
    batch = LocalBatch(torch.zeros(1, 4), y, None, logits)
    c = client(ConstantTeacher(teacher_logits), classes=3)
    strategy.client_begin(c)
    loss = local_loss_on(strategy, c, batch)
    expected = F.cross_entropy(logits, y) + 0.7 * not_true_kl(logits, teacher_logits, y, 2.0)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)


# ---------------------------------------------------------------------------- fedlsd / fedcad


def test_self_distill_loss_by_hand():
    # student p = (3/4, 1/4), y = 1: CE = ln 4; teacher uniform: soft CE = -(ln .75 + ln .25)/2
    s = torch.tensor([[math.log(3.0), 0.0]])
    t = torch.tensor([[0.0, 0.0]])
    y = torch.tensor([1])
    ce, soft = math.log(4.0), -(math.log(0.75) + math.log(0.25)) / 2
    assert self_distill_loss(s, t, y, 0.0).item() == pytest.approx(ce, rel=1e-6)
    assert self_distill_loss(s, t, y, 1.0).item() == pytest.approx(soft, rel=1e-6)
    assert self_distill_loss(s, t, y, 0.3).item() == pytest.approx(0.7 * ce + 0.3 * soft, rel=1e-6)
    # temperature softens student and teacher in the soft term only (no T^2 factor)
    p = (math.sqrt(3) / (math.sqrt(3) + 1), 1 / (math.sqrt(3) + 1))  # softmax(s / 2)
    soft_t2 = -(0.5 * math.log(p[0]) + 0.5 * math.log(p[1]))
    got = self_distill_loss(s, t, y, 0.5, temperature=2.0).item()
    assert got == pytest.approx(0.5 * ce + 0.5 * soft_t2, rel=1e-6)


def test_self_distill_loss_per_sample_weights():
    torch.manual_seed(1)
    s, t = torch.randn(2, 3), torch.randn(2, 3)
    y = torch.tensor([0, 2])
    w = torch.tensor([0.25, 0.5])
    one = [self_distill_loss(s[i : i + 1], t[i : i + 1], y[i : i + 1], float(w[i])) for i in (0, 1)]
    assert self_distill_loss(s, t, y, w).item() == pytest.approx((one[0] + one[1]).item() / 2)


def test_fedlsd_with_zero_weight_is_plain_ce():
    torch.manual_seed(2)
    model = Lin(classes=3)
    x, y = torch.randn(5, 4), torch.tensor([0, 1, 2, 1, 0])
    _, logits = model.features_and_logits(x)
    batch = LocalBatch(x, y, None, logits)
    teacher = ConstantTeacher([[4.0, -1.0, 0.5]])
    lsd0 = FedLSD(FedLSDParams(distill_weight=0.0), ctx=None)
    c = client(teacher, classes=3)
    lsd0.client_begin(c)
    assert local_loss_on(lsd0, c, batch).item() == pytest.approx(batch.ce().item(), rel=1e-6)
    lsd = FedLSD(FedLSDParams(), ctx=None)
    assert lsd.params.distill_weight == 0.5 and lsd.params.temperature == 1.0
    expected = self_distill_loss(logits, teacher.logits.expand(5, -1), y, 0.5)
    assert local_loss_on(lsd, c, batch).item() == pytest.approx(expected.item(), rel=1e-6)


def test_fedcad_weights_right_wrong_mixed_and_absent():
    beta, gamma = 0.25, 0.5
    y = torch.tensor([0, 0, 1, 3, 3])
    probs = torch.tensor(
        [
            [1.0, 0.0, 0.0, 0.0],  # class 0, teacher right with certainty
            [1.0, 0.0, 0.0, 0.0],
            [0.0, 0.0, 1.0, 0.0],  # class 1, teacher certain and wrong
            [0.25, 0.25, 0.0, 0.5],  # class 3: p_y = .5 -> phi 0
            [0.0, 0.1, 0.0, 0.9],  # p_y = .9 -> phi .8
        ]
    )
    a = class_adaptive_weights(probs, y, 4, beta, gamma)
    assert a[0].item() == pytest.approx(gamma)  # p_y = 1 -> a = gamma
    assert a[1].item() == pytest.approx(beta)  # p_y = 0 -> a = beta
    assert a[2].item() == pytest.approx((gamma + beta) / 2)  # absent locally: the midpoint
    assert a[3].item() == pytest.approx((gamma - beta) / 2 * 0.4 + (gamma + beta) / 2)


def test_fedcad_client_begin_uses_the_global_model_on_local_data():
    # the global model puts all its mass on class 0: right on class 0, wrong on class 1
    teacher = ConstantTeacher([[50.0, 0.0, 0.0]])
    data = ArraySplit(torch.zeros(4, 4), torch.tensor([0, 1, 1, 0]))
    strategy = FedCAD(FedCADParams(), ctx=None)
    c = client(teacher, data=data, classes=3)
    strategy.client_begin(c)
    assert torch.allclose(c.declared.own["class_weights"], torch.tensor([0.5, 0.25, 0.375]))
    assert c.declared.shared_models["global"] is teacher
    batch = LocalBatch(torch.zeros(3, 4), torch.tensor([1, 0, 1]), None, torch.zeros(3, 3))
    ctx = LocalContext(params={}, model=None, global_params={}, own=c.declared.own)
    assert strategy.sample_weights(batch, ctx).tolist() == [0.25, 0.5, 0.25]


def test_fedcad_class_weights_read_the_global_model_at_the_loss_temperature():
    """p^g is softened by the same T as the loss: logits (1, 0, 0) at T = 2 give class 0
    e^0.5 / (e^0.5 + 2) and class 1 1 / (e^0.5 + 2), each weight (γ−β)/2 (2 p_y − 1) + (γ+β)/2."""
    teacher = ConstantTeacher([[1.0, 0.0, 0.0]])
    data = ArraySplit(torch.zeros(2, 4), torch.tensor([0, 1]))
    strategy = FedCAD(FedCADParams(beta=0.25, gamma=0.5, temperature=2.0), ctx=None)
    c = client(teacher, data=data, classes=3)
    strategy.client_begin(c)
    e = math.exp(0.5)
    p = {0: e / (e + 2), 1: 1 / (e + 2)}
    want = [(0.5 - 0.25) / 2 * (2 * p[y] - 1) + (0.5 + 0.25) / 2 for y in (0, 1)] + [0.375]
    assert c.declared.own["class_weights"].tolist() == pytest.approx(want, rel=1e-6)


def test_fedcad_with_equal_bounds_is_fedlsd():
    # FedCAD: "when gamma = beta = C ... our approach degrades to FedLSD"
    torch.manual_seed(3)
    teacher = ConstantTeacher([[1.0, 2.0, -1.0]])
    data = ArraySplit(torch.zeros(6, 4), torch.tensor([0, 1, 2, 0, 1, 2]))
    cad = FedCAD(FedCADParams(beta=0.3, gamma=0.3, temperature=2.0), ctx=None)
    lsd = FedLSD(FedLSDParams(distill_weight=0.3, temperature=2.0), ctx=None)
    c = client(teacher, data=data, classes=3)
    cad.client_begin(c)
    batch = LocalBatch(torch.zeros(6, 4), data.y, None, torch.randn(6, 3))
    assert local_loss_on(cad, c, batch).item() == pytest.approx(local_loss_on(lsd, c, batch).item())


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="gamma"):
        FedCAD(FedCADParams(beta=0.6, gamma=0.5), ctx=None)
    with pytest.raises(ValueError, match="distill_weight"):
        FedLSD(FedLSDParams(distill_weight=1.5), ctx=None)
    with pytest.raises(ValueError, match="unlabeled"):
        FedDF(FedDFParams(unlabeled="imagenet32"), ctx=None)


def test_table1_traits():
    for name in ("fedntd", "fedlsd", "fedcad"):
        t = get_strategy_class(name).traits
        assert (t.extra_information, t.proxy_data, t.modifies_model) == ("none", False, False)
    t = get_strategy_class("feddf").traits
    assert (t.extra_information, t.proxy_data, t.modifies_model) == ("none", True, False)


# ---------------------------------------------------------------------------- feddf pieces


def test_avg_logits_kl_by_hand():
    # teachers (2, 0) and (0, 0) average to (1, 0): AVGLOGITS, not averaged probabilities
    teachers = torch.tensor([[[2.0, 0.0]], [[0.0, 0.0]]])
    student = torch.tensor([[0.0, 1.0]])
    expected = sigmoid(1) * 1 + sigmoid(-1) * -1  # log-ratios are +-1
    assert avg_logits_kl(student, teachers).item() == pytest.approx(expected, rel=1e-6)
    expected_t2 = (sigmoid(0.5) - sigmoid(-0.5)) * 0.5  # T = 2 without a T^2 factor
    assert avg_logits_kl(student, teachers, 2.0).item() == pytest.approx(expected_t2, rel=1e-6)


def test_noise_images_are_uniform_in_minus_1_1_and_reproducible():
    """FedDF Fig. 5: "random uniformly sampled noises", in the range of its code's random data."""
    a = noise_images(64, (3, 8, 8), torch.Generator().manual_seed(3), torch.device("cpu"))
    b = noise_images(64, (3, 8, 8), torch.Generator().manual_seed(3), torch.device("cpu"))
    assert a.dtype == torch.get_default_dtype() and a.shape == (64, 3, 8, 8)
    assert torch.equal(a, b)
    assert -1 <= a.min().item() < -0.99 and 0.99 < a.max().item() <= 1
    # uniform: each quarter of [-1, 1] holds a quarter of the 12,288 values, within 4 sd
    # of a binomial count (sd = sqrt(n p (1 - p)) = 48)
    counts = torch.histc(a, bins=4, min=-1, max=1)
    assert (counts - a.numel() / 4).abs().max().item() < 4 * 48


def feddf_server(val_y: int, **params) -> FedDF:
    """FedDF over Lin models on float vectors (text-kind data pass the preprocessor unchanged);
    the validation labels are all ``val_y``."""
    torch.manual_seed(4)
    train = ArraySplit(torch.randn(40, 4), torch.zeros(40, dtype=torch.long))
    val = ArraySplit(torch.randn(10, 4), torch.full((10,), val_y, dtype=torch.long))
    dataset = SimpleNamespace(kind="text", input_shape=(4,), train=train, val=val)
    ctx = ServerContext(
        spec=RunSpec(device="cpu", seed=5), num_classes=2, num_clients=2,
        device=torch.device("cpu"), build_model=Lin, dataset=dataset, client_sizes=[20, 20],
        client_label_counts=torch.ones(2, 2, dtype=torch.long),
    )  # fmt: skip
    return FedDF(FedDFParams(**params), ctx)


def biased(toward: int, margin: float) -> Lin:
    """A Lin model whose classifier ignores its input and prefers class ``toward`` by ``margin``."""
    torch.manual_seed(6)
    m = Lin()
    with torch.no_grad():
        m.classifier.weight.zero_()
        m.classifier.bias.copy_(torch.tensor([0.0, 0.0]))
        m.classifier.bias[toward] = margin
    return m


def update(model: Lin) -> ClientUpdate:
    return ClientUpdate(0, {k: v.clone() for k, v in model.state_dict().items()}, 20, 1, 0.0)


def test_feddf_keeps_its_best_distilled_model_even_below_the_average():
    """The paper does not say what happens when no distilled model validates better than the
    average it starts from; FedDF's released code, as its README runs FedDF
    (``return_best_model_on_val`` left at False), keeps the best distilled one."""
    # the average is perfect on validation (all class 0); the teachers pull toward class 1
    server = feddf_server(val_y=0, max_steps=100, eval_every=5, patience=10, lr=0.05)
    student = biased(0, 1.0)
    before = {k: v.clone() for k, v in student.state_dict().items()}
    out = server.server_update(0, student, [update(biased(1, 5.0)), update(biased(1, 3.0))])
    # the distillation never beat its first validation (step 5): stopped 10 steps after it, and
    # that step's model was kept although the average validated better
    assert out["distill_steps"] == 15
    assert out["distill_best_step"] == 5
    assert out["distill_val_acc_init"] == 1.0
    assert out["distill_val_acc"] < 1.0
    assert server._val_acc(student) == out["distill_val_acc"]
    assert any(not torch.equal(v, before[k]) for k, v in student.state_dict().items())


def test_feddf_distils_toward_the_teachers_and_keeps_the_best_step():
    # the average predicts class 1 by a hair; the teachers (and the validation labels) say class 0
    server = feddf_server(val_y=0, max_steps=20, eval_every=5, patience=1000, lr=0.05)
    student = biased(1, 0.01)
    out = server.server_update(0, student, [update(biased(0, 5.0)), update(biased(0, 3.0))])
    assert out["distill_val_acc_init"] == 0.0
    assert out["distill_steps"] == 20  # patience never ran out
    assert out["distill_best_step"] in (5, 10, 15, 20)
    assert out["distill_val_acc"] == 1.0
    assert server._val_acc(student) == out["distill_val_acc"]  # the best model is the one kept


def released_stopping(accs, eval_every, patience, max_steps):
    """The FedDF code's NoiseKTSolver.distillation as its README runs it (return_best_model_on_val
    False), replayed: (steps taken, step of the model kept)."""
    best, best_loc, n, accs = None, 0, 0, iter(accs)
    while n < max_steps:
        if (n + 1) % eval_every == 0:
            acc = next(accs)
            if best is None or acc > best:  # BestPerf: the first validation is a best
                best, best_loc = acc, n + 1
            if n + 1 - best_loc >= patience:  # check_early_stopping, before n += 1
                return n + 1, best_loc
        n += 1
    return n, best_loc


@pytest.mark.parametrize(
    "accs", [[0.5 + 0.01 * i for i in range(20)], [0.5, 0.55, 0.52] + [0.54] * 17]
)
def test_feddf_stops_when_its_own_validation_plateaus(accs):
    """Paper: "stop distillation after the validation performance plateaus for 1e3 steps". A
    distillation that stays below the averaged model (0.6) goes on while it gains, as in the
    released code; stopped when it plateaus, it keeps its best distilled model."""
    server = feddf_server(val_y=0, max_steps=100, eval_every=5, patience=20)
    script = iter([0.6, *accs])
    server._val_acc = lambda model: next(script)
    student = biased(1, 0.01)
    out = server.server_update(0, student, [update(biased(0, 5.0)), update(biased(0, 3.0))])
    steps, kept = released_stopping(accs, 5, 20, 100)
    assert (out["distill_steps"], out["distill_best_step"]) == (steps, kept)
    assert out["distill_val_acc"] == accs[kept // 5 - 1]


def test_feddf_with_zero_steps_leaves_the_model_alone():
    server = feddf_server(val_y=0, max_steps=0)
    student = biased(1, 0.01)
    before = {k: v.clone() for k, v in student.state_dict().items()}
    out = server.server_update(0, student, [update(biased(0, 5.0))])
    assert out["distill_steps"] == out["distill_best_step"] == 0
    assert out["distill_val_acc"] == out["distill_val_acc_init"] == 0.0
    assert all(torch.equal(v, before[k]) for k, v in student.state_dict().items())


def test_feddf_unlabeled_sources():
    server = feddf_server(val_y=0, unlabeled="train-slice", unlabeled_fraction=0.25, batch_size=4)
    pool = server._unlabeled_pool()
    assert pool.shape == (10, 4)  # a quarter of the 40 training inputs
    # rows of the training split, fixed by the run seed
    assert all(any(torch.equal(r, t) for t in server.ctx.dataset.train.x) for r in pool)
    assert torch.equal(pool, feddf_server(val_y=0, unlabeled_fraction=0.25)._unlabeled_pool())
    first = next(server._batches(round=2))
    again = next(server._batches(round=2))
    assert first.shape == (4, 4) and torch.equal(first, again)  # a function of (seed, round)
    assert not torch.equal(first, next(server._batches(round=3)))
    # another dataset must fit the model's input
    with pytest.raises(ValueError, match="does not fit"):
        feddf_server(val_y=0, unlabeled="mnist5k")


def test_feddf_noise_batches_are_uniform_noise_fresh_for_every_batch():
    dataset = SimpleNamespace(
        kind="image", input_shape=(1, 6, 6), mean=(0.5,), std=(0.25,),
        val=ArraySplit(torch.zeros(2, 1, 6, 6, dtype=torch.uint8), torch.zeros(2).long()),
    )  # fmt: skip
    ctx = ServerContext(
        spec=RunSpec(device="cpu"), num_classes=2, num_clients=2, device=torch.device("cpu"),
        build_model=None, dataset=dataset, client_sizes=[1, 1],
        client_label_counts=torch.ones(2, 2, dtype=torch.long),
    )  # fmt: skip
    server = FedDF(FedDFParams(unlabeled="noise", batch_size=3), ctx)
    assert server._unlabeled_pool() is None
    batches = server._batches(round=0)
    x1, x2 = next(batches), next(batches)
    assert x1.shape == (3, 1, 6, 6) and x1.dtype == torch.float32
    # the noise as drawn: not taken through the dataset's normalisation, nor cropped or flipped
    gen = torch.Generator().manual_seed(derive_seed(ctx.spec.seed, "feddf", 0))
    drawn = [noise_images(3, (1, 6, 6), gen, torch.device("cpu")) for _ in range(2)]
    assert torch.equal(x1, drawn[0]) and torch.equal(x2, drawn[1])
    assert -1 <= x1.min().item() and x1.max().item() <= 1
    assert not torch.equal(x1, x2)  # fresh noise for every batch


def test_feddf_defaults_follow_the_paper():
    p = FedDF.make_params({}, "cifar10", "resnet8")
    assert (p.max_steps, p.patience, p.eval_every, p.batch_size, p.lr) == (
        10_000, 1_000, 100, 128, 1e-3
    )  # fmt: skip
    assert (p.grad_clip, p.temperature, p.unlabeled) == (5.0, 1.0, "cifar100")
    assert FedDF.make_params({}, "mnist5k", "cnn").unlabeled == "train-slice"


# ---------------------------------------------------------------------------- real runs

SMALL = dict(
    dataset="mnist5k", clients=5, participation=0.4, alpha=1.0, local_epochs=1, device="cpu"
)
# a short server distillation so the runs stay a few seconds
FEDDF_SHORT = {"max_steps": 10, "eval_every": 5, "batch_size": 32}
COLS = ["round", "test_acc", "test_loss", "train_loss", "bytes_sent", "bytes_received"]


def metrics(out):
    return pd.read_parquet(out / "metrics.parquet")


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["fedntd", "fedlsd", "fedcad"])
def test_self_distillation_strategies_learn(tmp_path, strategy):
    Run(RunSpec(strategy=strategy, rounds=3, **SMALL), tmp_path / "r").run()
    df = metrics(tmp_path / "r")
    assert list(df["round"]) == [1, 2, 3]
    assert df["test_acc"].iloc[2] > df["test_acc"].iloc[0]
    # nothing travels besides the model: FedAvg's traffic
    assert df["bytes_sent"].iloc[0] == df["bytes_received"].iloc[0]


@pytest.fixture(scope="module")
def feddf_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("feddf")
    spec = RunSpec(strategy="feddf", params=FEDDF_SHORT, rounds=3, **SMALL)
    Run(spec, root / "full").run()
    Run(spec, root / "cut").run(stop_after_round=1)
    Run(spec, root / "cut").run()
    return metrics(root / "full"), metrics(root / "cut")


@pytest.mark.slow
def test_feddf_learns_and_records_its_distillation(feddf_runs):
    df, _ = feddf_runs
    assert df["test_acc"].iloc[2] > df["test_acc"].iloc[0]
    steps, best = df["server_distill_steps"], df["server_distill_best_step"]
    assert steps.between(5, 10).all()  # a validation every 5 steps, at most 10
    # a distilled model is kept every round (the averaged one is no candidate)
    assert best.isin([5, 10]).all() and (best <= steps).all()


@pytest.mark.slow
def test_feddf_resume_is_bit_identical(feddf_runs):
    full, cut = feddf_runs
    cols = COLS + [c for c in full.columns if c.startswith("server_")]
    pd.testing.assert_frame_equal(full[cols], cut[cols])


@pytest.mark.slow
def test_feddf_without_distillation_is_fedavg(tmp_path):
    Run(RunSpec(strategy="fedavg", rounds=2, **SMALL), tmp_path / "avg").run()
    spec = RunSpec(strategy="feddf", params={"max_steps": 0}, rounds=2, **SMALL)
    Run(spec, tmp_path / "df").run()
    avg, df = metrics(tmp_path / "avg"), metrics(tmp_path / "df")
    pd.testing.assert_frame_equal(avg[COLS], df[COLS])
    assert (df["server_distill_steps"] == 0).all()
