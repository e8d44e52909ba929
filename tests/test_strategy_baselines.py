"""The fedgkd paper's baselines: moon, feddistill+ and fedgen.

Loss terms against hand-computed values on tiny tensors, the strategies' hooks on a tiny model, and
(slow) real 3-round runs on mnist5k: learning, bit-identical resumption, exact byte accounting."""

import math

import pandas as pd
import pytest
import torch

from fedkd.config import RunSpec
from fedkd.engine.checkpoint import load_checkpoint
from fedkd.engine.run import Run
from fedkd.engine.sequential import local_loss_on
from fedkd.models import build_model
from fedkd.strategies import get_strategy_class
from fedkd.strategies.base import (
    ClientContext,
    ClientUpdate,
    LocalBatch,
    ServerContext,
    frozen_copy,
    tensor_bytes,
)
from fedkd.strategies.feddistill_plus import (
    FedDistillPlus,
    FedDistillPlusParams,
    average_label_logits,
    label_distill_loss,
    per_label_mean_logits,
)
from fedkd.strategies.moon import Moon, MoonParams, model_contrastive_loss

LN2 = math.log(2.0)


# ------------------------------------------------------------------ tiny harness for the hooks
def tiny_ctx(num_classes=3, head=False, seed=0):
    torch.manual_seed(0)

    def build():
        return build_model("cnn", num_classes, (1, 8, 8), projection_head=head)

    return ServerContext(
        spec=RunSpec(seed=seed, device="cpu"),
        num_classes=num_classes,
        num_clients=4,
        device=torch.device("cpu"),
        build_model=build,
        dataset=None,
        client_sizes=[6] * 4,
        client_label_counts=torch.zeros(4, num_classes, dtype=torch.long),
    )


class TinyData:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return int(self.y.shape[0])


def preprocess(x, train, gen=None):
    return x.float() / 255.0


def tiny_client(ctx, cid, round, model, global_model, payload, y):
    g = torch.Generator().manual_seed(100 + cid)
    x = torch.randint(0, 256, (len(y), 1, 8, 8), generator=g, dtype=torch.uint8)
    return ClientContext(
        client_id=cid,
        round=round,
        model=model,
        global_model=frozen_copy(global_model),
        payload=payload,
        data=TinyData(x, torch.tensor(y)),
        num_classes=ctx.num_classes,
        device=ctx.device,
        build_model=ctx.build_model,
        preprocess=preprocess,
    )


def batch_of(client):
    x = preprocess(client.data.x, train=True)
    f, logits = client.model.features_and_logits(x)
    return LocalBatch(x, client.data.y, f, logits)


# ------------------------------------------------------------------ moon: the contrastive loss
def test_moon_loss_is_log2_when_positive_equals_negative():
    g = torch.Generator().manual_seed(0)
    z, other = torch.randn(5, 8, generator=g), torch.randn(5, 8, generator=g)
    per = model_contrastive_loss(z, other, other, tau=0.5, reduction="none")
    assert torch.allclose(per, torch.full((5,), LN2), atol=1e-6)
    assert model_contrastive_loss(z, other, other, tau=0.5).item() == pytest.approx(LN2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_moon_loss_sends_exactly_no_gradient_when_positive_equals_negative(dtype):
    """A client's first round under first_negative global or initial: the negative is the
    positive. The term is then a constant, in the gradient too (not just up to rounding), also
    vmapped over clients as the batched trainer computes it."""
    g = torch.Generator().manual_seed(0)
    z = torch.randn(3, 16, 32, generator=g, dtype=dtype, requires_grad=True)
    pos = torch.randn(3, 16, 32, generator=g, dtype=dtype)
    for neg in (pos, pos.clone()):
        loss = model_contrastive_loss(z[0], pos[0], neg[0], tau=0.5)
        (grad,) = torch.autograd.grad(loss, z)
        assert torch.equal(grad, torch.zeros_like(z))
        per_client = torch.func.vmap(lambda a, b, c: model_contrastive_loss(a, b, c, tau=0.5))
        (grad,) = torch.autograd.grad(per_client(z, pos, neg).sum(), z)
        assert torch.equal(grad, torch.zeros_like(z))
    # a different negative does send a gradient (so the zero above is not a broken graph)
    loss = model_contrastive_loss(z[0], pos[0], pos[1], tau=0.5)
    assert torch.autograd.grad(loss, z)[0].abs().max() > 1e-3


def test_moon_loss_equals_the_authors_cross_entropy_over_the_two_cosines():
    """MOON's code and the FedNTD authors' (algorithms/moon/criterion.py at fd7e20c) compute
    l_con as cross_entropy(cat([cos(z, z_glob), cos(z, z_prev)]) / tau, label 0); the loss here
    is the same function: values and gradients agree to float64 rounding."""
    g = torch.Generator().manual_seed(1)
    z = torch.randn(32, 16, generator=g, dtype=torch.float64, requires_grad=True)
    pos, neg = torch.randn(2, 32, 16, generator=g, dtype=torch.float64)
    pos = pos + z.detach()  # positives nearer than negatives, as in training
    tau = 0.5
    logits = torch.stack(
        [torch.nn.functional.cosine_similarity(z, pos, dim=-1),
         torch.nn.functional.cosine_similarity(z, neg, dim=-1)], dim=1,
    ) / tau  # fmt: skip
    reference = torch.nn.functional.cross_entropy(logits, torch.zeros(32, dtype=torch.long))
    ours = model_contrastive_loss(z, pos, neg, tau)
    assert ours.item() == pytest.approx(reference.item(), rel=1e-14)
    (g_ref,) = torch.autograd.grad(reference, z)
    (g_ours,) = torch.autograd.grad(ours, z)
    assert torch.allclose(g_ours, g_ref, rtol=1e-12, atol=1e-15 * float(g_ref.abs().max()))


def test_moon_loss_by_hand():
    # sample 1: cos(z, pos) = 1, cos(z, neg) = 0; sample 2: cos = 1/sqrt2 and -1/sqrt2
    # l = -log(e^{p/t} / (e^{p/t} + e^{n/t})) = log(1 + e^{(n - p)/t}), t = 0.5
    z = torch.tensor([[1.0, 0.0], [1.0, 1.0]], requires_grad=True)
    pos = torch.tensor([[3.0, 0.0], [2.0, 0.0]])  # cosine ignores the scale
    neg = torch.tensor([[0.0, 1.0], [-1.0, 0.0]])
    expected = [math.log(1 + math.exp(-2.0)), math.log(1 + math.exp(-2 * math.sqrt(2)))]
    per = model_contrastive_loss(z, pos, neg, tau=0.5, reduction="none")
    assert per.tolist() == pytest.approx(expected, rel=1e-6)
    loss = model_contrastive_loss(z, pos, neg, tau=0.5)
    assert loss.item() == pytest.approx(sum(expected) / 2, rel=1e-6)
    # tau = 1 halves the exponent
    assert model_contrastive_loss(z, pos, neg, tau=1.0, reduction="none")[0].item() == (
        pytest.approx(math.log(1 + math.exp(-1.0)), rel=1e-6)
    )
    loss.backward()
    assert z.grad is not None and z.grad.abs().sum() > 0


def test_moon_mu_per_dataset_and_traits():
    cls = get_strategy_class("moon")
    assert cls is Moon and cls.uses_projection_head
    mu = {d: cls.make_params({}, d, "auto").mu for d in ("cifar10", "cifar100", "mnist5k")}
    assert mu == {"cifar10": 5.0, "cifar100": 5.0, "mnist5k": 5.0}
    assert cls.make_params({}, "tinyimagenet", "resnet50").mu == 1.0
    for d in ("agnews", "sst5", "synthtext"):
        assert cls.make_params({}, d, "distilbert").mu == 0.1
    assert cls.make_params({"mu": 2.0}, "cifar10", "resnet8").mu == 2.0
    assert cls.make_params({}, "cifar10", "resnet8").tau == 0.5
    assert (cls.traits.extra_information, cls.traits.proxy_data) == ("none", False)
    assert cls.traits.modifies_model


def test_fedprox_mu_per_dataset():
    cls = get_strategy_class("fedprox")
    mu = {d: cls.make_params({}, d, "auto").mu for d in ("cifar10", "mnist", "mnist5k")}
    assert mu == {"cifar10": 0.01, "mnist": 0.01, "mnist5k": 0.01}  # MNIST stands in for CIFAR-10
    for d in ("cifar100", "tinyimagenet", "agnews", "sst5", "synthtext"):
        assert cls.make_params({}, d, "auto").mu == 0.001
    assert cls.make_params({"mu": 0.1}, "cifar10", "resnet8").mu == 0.1


def test_moon_previous_model_is_per_client_state():
    ctx = tiny_ctx(head=True)
    moon = Moon(MoonParams(mu=5.0, tau=0.5, first_negative="global"), ctx)
    global_model = ctx.build_model()
    model = ctx.build_model()
    model.load_state_dict(global_model.state_dict())
    client = tiny_client(ctx, 2, 0, model, global_model, {}, [0, 1, 2, 1])
    moon.client_begin(client)
    # first participation, first_negative "global": the received global model is the negative
    # -> log 2 (tests/test_strategy_choices.py holds the other choices)
    b = batch_of(client)
    assert local_loss_on(moon, client, b).item() == pytest.approx(b.ce().item() + 5 * LN2, rel=1e-6)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))  # "local training"
    assert moon.client_end(client) == {}  # nothing uploaded besides the weights
    trained = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)  # the worker's model trains the next client in place
    stored = moon.state_dict()["previous"][2]
    assert all(v.device.type == "cpu" for v in stored.values())
    assert all(torch.equal(stored[k], v) for k, v in trained.items())  # a copy, kept as it was
    model.load_state_dict(trained)

    # next participation, new global model: the negative is the stored local model
    new_global = ctx.build_model()
    resumed = Moon(MoonParams(mu=5.0, tau=0.5, first_negative="global"), ctx)
    resumed.load_state_dict(moon.state_dict())
    worker = ctx.build_model()
    worker.load_state_dict(new_global.state_dict())
    client = tiny_client(ctx, 2, 3, worker, new_global, {}, [0, 1, 2, 1])
    resumed.client_begin(client)
    b = batch_of(client)
    with torch.no_grad():
        z_glob, z_prev = new_global.features(b.x), model.features(b.x)
    expected = b.ce() + 5 * model_contrastive_loss(b.features, z_glob, z_prev, 0.5)
    got = local_loss_on(resumed, client, b)
    assert got.item() == pytest.approx(expected.item(), rel=1e-6)
    assert got.item() != pytest.approx(b.ce().item() + 5 * LN2, rel=1e-3)
    # a client never seen still gets the global model as its negative
    other = tiny_client(ctx, 3, 3, worker, new_global, {}, [0, 1])
    resumed.client_begin(other)
    previous = other.declared.own_models["previous"]
    assert all(torch.equal(previous[n], t) for n, t in new_global.state_dict().items())


# ------------------------------------------------------------------ feddistill+
def test_per_label_mean_logits_by_hand():
    logits = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    means, counts = per_label_mean_logits(logits, torch.tensor([0, 0, 1]), 3)
    assert means.tolist() == [[2.0, 3.0], [5.0, 6.0], [0.0, 0.0]]
    assert counts.tolist() == [2, 1, 0]


def test_global_logits_average_over_the_clients_holding_each_label():
    # 2 clients, 4 labels, 3 logits; label 1 only at A, label 2 only at B, label 3 at nobody
    means = torch.tensor(
        [
            [[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [9.0, 9.0, 9.0], [7.0, 7.0, 7.0]],  # A
            [[3.0, 0.0, 2.0], [5.0, 5.0, 5.0], [0.0, 0.0, 4.0], [7.0, 7.0, 7.0]],  # B
        ]
    )
    counts = torch.tensor([[10, 3, 0, 0], [1, 0, 6, 0]])
    avg, present = average_label_logits(means, counts)
    # uniform over holders, whatever their counts (rows of absent labels are ignored)
    assert avg.tolist() == [[2.0, 0.0, 1.0], [0.0, 2.0, 0.0], [0.0, 0.0, 4.0], [0.0, 0.0, 0.0]]
    assert present.tolist() == [True, True, True, False]


def test_label_distill_loss_by_hand():
    # label 0: teacher softmax([0, ln 3]) = (1/4, 3/4); student (1/2, 1/2); label 1 not known yet
    global_logits = torch.tensor([[0.0, math.log(3.0)], [5.0, 0.0]])
    known = torch.tensor([True, False])
    student = torch.zeros(2, 2)
    kl = 0.25 * math.log(0.25 / 0.5) + 0.75 * math.log(0.75 / 0.5)
    loss = label_distill_loss(student, torch.tensor([0, 1]), global_logits, known)
    assert loss.item() == pytest.approx(kl / 2, rel=1e-6)
    both = label_distill_loss(student, torch.tensor([0, 0]), global_logits, known)
    assert both.item() == pytest.approx(kl, rel=1e-6)


def test_feddistill_plus_hooks():
    ctx = tiny_ctx(num_classes=3)
    s = FedDistillPlus(FedDistillPlusParams(), ctx)
    assert s.params.coef == 0.1
    assert s.traits.extra_information != "none" and not s.traits.modifies_model
    assert s.payload(0, None) == {}  # nothing to send before any logits exist
    model = ctx.build_model()
    client = tiny_client(ctx, 0, 0, model, model, {}, [0, 2, 2, 0, 0])
    s.client_begin(client)
    b = batch_of(client)
    assert local_loss_on(s, client, b).item() == pytest.approx(b.ce().item())
    up = s.client_end(client)
    assert model.training  # restored after the eval-mode pass
    with torch.no_grad():
        model.eval()
        logits = model(preprocess(client.data.x, train=False))
        model.train()
    assert up["label_counts"].tolist() == [3, 0, 2]
    assert torch.allclose(up["label_logits"][0], logits[[0, 3, 4]].mean(0), atol=1e-6)
    assert torch.allclose(up["label_logits"][2], logits[[1, 2]].mean(0), atol=1e-6)
    assert tensor_bytes(up) == 3 * 3 * 4 + 3 * 8

    # server: average the uploads; a label nobody held this round keeps its previous row
    a = {"label_logits": torch.tensor([[1.0, 0, 0], [0, 0, 0], [0, 0, 3]]),
         "label_counts": torch.tensor([2, 0, 1])}  # fmt: skip
    b_ = {"label_logits": torch.tensor([[3.0, 0, 0], [0, 0, 0], [0, 0, 0]]),
          "label_counts": torch.tensor([5, 0, 0])}  # fmt: skip
    ups = [ClientUpdate(i, {}, 1, 1, 0.0, e) for i, e in enumerate((a, b_))]
    s.server_update(0, None, ups)
    assert s.global_logits.tolist() == [[2.0, 0, 0], [0, 0, 0], [0, 0, 3.0]]
    assert s.known.tolist() == [True, False, True]
    c = {"label_logits": torch.tensor([[0.0, 0, 0], [0, 4, 0], [0, 0, 0]]),
         "label_counts": torch.tensor([0, 7, 0])}  # fmt: skip
    s.server_update(1, None, [ClientUpdate(2, {}, 1, 1, 0.0, c)])
    assert s.global_logits.tolist() == [[2.0, 0, 0], [0, 4.0, 0], [0, 0, 3.0]]
    assert s.known.all()
    sent = s.payload(2, None)
    assert tensor_bytes(sent) == 3 * 3 * 4 + 3  # float32 logits + bool mask
    restored = FedDistillPlus(FedDistillPlusParams(), ctx)
    restored.load_state_dict(s.state_dict())
    assert torch.equal(restored.global_logits, s.global_logits)

    # with logits: CE + 0.1 * KL(softmax(global[y]) || student)
    client = tiny_client(ctx, 0, 2, model, model, sent, [0, 2, 2, 0, 0])
    s.client_begin(client)
    b = batch_of(client)
    expected = b.ce() + 0.1 * label_distill_loss(
        b.logits, b.y, sent["global_logits"], sent["known"]
    )
    assert local_loss_on(s, client, b).item() == pytest.approx(expected.item(), rel=1e-6)
    assert local_loss_on(s, client, b).item() > b.ce().item()


def test_feddistill_plus_released_target_is_uniform():
    ctx = tiny_ctx(num_classes=3)
    released = FedDistillPlus(FedDistillPlusParams(target="uniform"), ctx)
    default = FedDistillPlus(FedDistillPlusParams(), ctx)
    assert default.params.target == "global"
    model = ctx.build_model()
    # the same exchange as the default: uploads, server averaging and the payload
    client = tiny_client(ctx, 0, 0, model, model, {}, [0, 2, 2, 0, 0])
    released.client_begin(client)
    up = released.client_end(client)
    for s in (released, default):
        s.server_update(0, None, [ClientUpdate(0, {}, 1, 1, 0.0, up)])
    sent = released.payload(1, None)
    assert tensor_bytes(sent) == tensor_bytes(default.payload(1, None)) > 0
    # first round: CE only
    b = batch_of(client)
    assert local_loss_on(released, client, b).item() == pytest.approx(b.ce().item())
    # later rounds: every sample toward softmax(0) = uniform, whatever the received logits
    sent = {"global_logits": 5.0 * torch.eye(3), "known": torch.ones(3, dtype=torch.bool)}
    client = tiny_client(ctx, 0, 1, model, model, sent, [0, 2, 2, 0, 1])
    released.client_begin(client)
    client_d = tiny_client(ctx, 0, 1, model, model, sent, [0, 2, 2, 0, 1])
    default.client_begin(client_d)
    b = batch_of(client)
    log_q = torch.log_softmax(b.logits, dim=1)
    kl_uniform = (-math.log(3.0) - log_q).mean(1).mean()  # KL(u || q) = sum_k u_k log(u_k / q_k)
    got = local_loss_on(released, client, b)
    assert got.item() == pytest.approx((b.ce() + 0.1 * kl_uniform).item(), rel=1e-5)
    toward_global = local_loss_on(default, client_d, b)
    assert toward_global.item() - got.item() > 0.05  # the default: toward softmax(5 onehot(y))
    with pytest.raises(ValueError, match="target='zeros'.*uniform"):
        FedDistillPlusParams(target="zeros")


# ------------------------------------------------------------------ real runs (mnist5k, CPU)
SPEC = dict(
    dataset="mnist5k", clients=5, participation=0.4, alpha=1.0, local_epochs=1, rounds=3,
    device="cpu",
)  # fmt: skip
STRATEGIES = ("moon", "feddistill+", "fedgen")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Per strategy: 3 rounds straight, and 1 round then a restart that resumes to 3."""
    cache = {}

    def get(strategy):
        if strategy not in cache:
            root = tmp_path_factory.mktemp(strategy.replace("+", "plus"))
            spec = RunSpec(strategy=strategy, **SPEC)
            quiet = {"log": lambda msg: None}
            Run(spec, root / "full", **quiet).run()
            Run(spec, root / "cut", **quiet).run(stop_after_round=1)
            after_one = load_checkpoint(root / "cut" / "checkpoint.pt")["strategy"]
            Run(spec, root / "cut", **quiet).run()
            cache[strategy] = (
                pd.read_parquet(root / "full" / "metrics.parquet"),
                pd.read_parquet(root / "cut" / "metrics.parquet"),
                after_one,
            )
        return cache[strategy]

    return get


@pytest.mark.slow
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_three_rounds_learn(runs, strategy):
    full, _, _ = runs(strategy)
    assert list(full["round"]) == [1, 2, 3]
    assert full["test_acc"].iloc[2] > full["test_acc"].iloc[0]


@pytest.mark.slow
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_resume_is_bit_identical(runs, strategy):
    full, cut, after_one = runs(strategy)
    # the state that must survive the restart was in the checkpoint
    if strategy == "moon":
        assert sorted(after_one["previous"]) == full["clients"].iloc[0].tolist()
    elif strategy == "fedgen":
        assert after_one["generator"] and after_one["optimizer"]["state"]
    else:
        assert bool(after_one["known"].any())
    cols = [
        c for c in full.columns if c not in ("seconds", "local_seconds", "class_acc", "clients")
    ]
    pd.testing.assert_frame_equal(full[cols], cut[cols])
    for col in ("class_acc", "clients"):
        assert full[col].map(list).tolist() == cut[col].map(list).tolist()


@pytest.mark.slow
def test_bytes_exceed_fedavg_by_exactly_what_is_exchanged(runs):
    c = 10  # mnist classes
    fedavg_model = tensor_bytes(build_model("cnn", c, (1, 28, 28)).state_dict())
    # FedGen generator for the CNN (feature dim 512, hidden 512, noise 64): two Linear layers,
    # BatchNorm1d weight/bias/running mean/var (float32) and its int64 batch counter
    gen_floats = (64 + c) * 512 + 512 + 4 * 512 + 512 * 512 + 512
    extra = {
        # sent: nothing in round 1, then global logits (float32) + known mask (bool)
        # received: per-label mean logits (float32) + label counts (int64)
        "feddistill+": ([0, c * c * 4 + c, c * c * 4 + c], c * c * 4 + c * 8),
        "fedgen": ([0, gen_floats * 4 + 8, gen_floats * 4 + 8], c * 8),
    }
    for strategy, (sent, received) in extra.items():
        full, _, _ = runs(strategy)
        n = full["clients"].map(len)
        assert (n == 2).all()
        assert (full["bytes_sent"] - n * fedavg_model).tolist() == [k * 2 for k in sent]
        assert (full["bytes_received"] - n * fedavg_model).tolist() == [received * 2] * 3
    # moon: the previous local models stay on the clients, only the (larger) model travels
    full, _, _ = runs("moon")
    moon_model = tensor_bytes(build_model("cnn", c, (1, 28, 28), projection_head=True).state_dict())
    assert (full["bytes_sent"] == 2 * moon_model).all()
    assert (full["bytes_received"] == 2 * moon_model).all()


def test_strategies_details_list_the_per_dataset_defaults(capsys):
    from fedkd.cli import main

    assert main(["strategies", "--details"]) == 0
    out = capsys.readouterr().out
    fedgen = out.split("\nfedgen\t", 1)[1].split("\nfedgkd\t", 1)[0]
    assert "  cifar10 (resnet8): coef=0.1, hidden_dim=512" in fedgen
    assert "  tinyimagenet (resnet50): coef=0.1, hidden_dim=2048" in fedgen
    assert "  cifar100 (resnet8): coef=1.0, hidden_dim=512" in fedgen
    assert "  sst5 (distilbert): coef=1.0, hidden_dim=768" in fedgen
    assert "  agnews (distilbert): mu=0.1" in out.split("\nmoon\t", 1)[1]
