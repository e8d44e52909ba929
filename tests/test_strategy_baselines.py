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
from fedkd.runtime.seeding import derive_seed
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
from fedkd.strategies.fedgen import (
    FeatureGenerator,
    FedGen,
    FedGenParams,
    coefficient,
    diversity_loss,
    generator_teacher_loss,
    teacher_label_weights,
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


# ------------------------------------------------------------------ fedgen
def test_generator_output_shape_and_noise():
    gen = FeatureGenerator(num_classes=10, feature_dim=64, hidden_dim=512, noise_dim=64)
    noise = gen.sample_noise(7, torch.Generator().manual_seed(0))
    assert noise.shape == (7, 64) and noise.min() >= 0 and noise.max() < 1
    out = gen(torch.arange(7), noise)
    assert out.shape == (7, 64)
    assert gen.hidden[0].in_features == 64 + 10 and gen.hidden[0].out_features == 512
    assert isinstance(gen.hidden[1], torch.nn.BatchNorm1d)


def test_fedgen_coefficient_decays_from_the_second_round():
    for index in ("one-based", "zero-based"):
        assert coefficient(1.0, 0, round_index=index) == 0.0  # round 1: the generator is untrained
    # FedGen's code: t is the 0-based round
    assert coefficient(1.0, 1, round_index="zero-based") == pytest.approx(0.98)
    assert coefficient(1.0, 10, round_index="zero-based") == pytest.approx(0.98**10)
    assert coefficient(10.0, 3, round_index="zero-based") == pytest.approx(10 * 0.98**3)
    assert coefficient(0.1, 50, 0.9, "zero-based") == pytest.approx(0.1 * 0.9**50)
    # the FedGKD authors' release (the default): t from 1, one more decay step in every round
    assert coefficient(1.0, 1) == pytest.approx(0.98**2)
    assert coefficient(10.0, 3, round_index="one-based") == pytest.approx(10 * 0.98**4)
    assert coefficient(0.1, 50, 0.9) == pytest.approx(0.1 * 0.9**51)


def test_diversity_loss_by_hand():
    # noise distance (mean squared) 1 between the two samples, feature distance (mean |.|) 1
    noise = torch.tensor([[0.0], [1.0]])
    feats = torch.tensor([[0.0, 0.0], [2.0, 0.0]])
    assert diversity_loss(noise, feats).item() == pytest.approx(math.exp(-0.5), rel=1e-6)
    assert diversity_loss(noise, torch.zeros(2, 2)).item() == pytest.approx(1.0)


def test_generator_teacher_loss_by_hand():
    # 2 clients, 2 labels, 1-d features. client 0 head: logits (f, -f); client 1: zeros (ln 2)
    w = torch.tensor([[[1.0], [-1.0]], [[0.0], [0.0]]])
    bias = torch.zeros(2, 2)
    counts = torch.tensor([[3, 0], [1, 5]])  # label 0: 3 vs 1 samples, label 1: only client 1
    lw = teacher_label_weights(counts)
    assert lw.tolist() == [[0.75, 0.25], [0.0, 1.0]]
    a = math.log(3.0) / 2  # CE of client 0 on (f=a, y=0) = log(1 + e^{-2a}) = log(4/3)
    feats = torch.tensor([[a], [0.0]])
    y = torch.tensor([0, 1])
    ce0 = math.log(4 / 3)
    expected = (0.75 * ce0 + 0.0 * LN2) / 2 + (0.25 * LN2 + 1.0 * LN2) / 2
    got = generator_teacher_loss(feats, y, w, bias, lw)
    assert got.item() == pytest.approx(expected, rel=1e-6)


def test_fedgen_defaults_per_model():
    cls = get_strategy_class("fedgen")
    assert cls is FedGen
    assert cls.make_params({}, "cifar10", "resnet8").hidden_dim == 512
    assert cls.make_params({}, "mnist5k", "cnn").hidden_dim == 512
    assert cls.make_params({}, "tinyimagenet", "resnet50").hidden_dim == 2048
    assert cls.make_params({}, "agnews", "distilbert").hidden_dim == 768
    assert cls.make_params({"hidden_dim": 32}, "cifar10", "resnet8").hidden_dim == 32
    p = cls.make_params({}, "cifar10", "resnet8")
    assert (p.noise_dim, p.gen_lr, p.gen_weight_decay) == (64, 1e-4, 1e-2)
    assert p.sample_labels == "all"  # generated labels from every class, as the authors
    # alpha_0 from the FedGKD authors' code: 0.1 on CIFAR-10 and Tiny-ImageNet, 1 on CIFAR-100
    # and the text sets; MNIST stands in for CIFAR-10, synthtext for the text sets
    names = (
        "cifar10",
        "tinyimagenet",
        "mnist",
        "mnist5k",
        "cifar100",
        "agnews",
        "sst5",
        "synthtext",
    )
    coef = {d: cls.make_params({}, d, "auto").coef for d in names}
    assert coef == {
        "cifar10": 0.1, "tinyimagenet": 0.1, "mnist": 0.1, "mnist5k": 0.1,
        "cifar100": 1.0, "agnews": 1.0, "sst5": 1.0, "synthtext": 1.0,
    }  # fmt: skip
    assert cls.make_params({"coef": 10.0}, "cifar10", "resnet8").coef == 10.0
    assert cls.traits.extra_information != "none"
    assert not cls.traits.proxy_data and not cls.traits.modifies_model
    with pytest.raises(ValueError, match="sample_labels"):
        FedGen(FedGenParams(sample_labels="batch"), tiny_ctx())


def _fedgen_round(s, round, heads, counts):
    global_model = s.ctx.build_model()
    ups = []
    for i, ((w, b), c) in enumerate(zip(heads, counts, strict=True)):
        state = {"classifier.weight": w, "classifier.bias": b}
        ups.append(ClientUpdate(i, state, 1, 1, 0.0, {"label_counts": torch.tensor(c)}))
    return s.server_update(round, global_model, ups)


# a small generator (64 hidden units instead of 512): the same code, a fraction of the time
GEN_SMALL = FedGenParams(gen_lr=1e-3, gen_steps=10, gen_batch_size=16, hidden_dim=64)


def test_fedgen_server_trains_the_generator_deterministically():
    ctx = tiny_ctx(num_classes=3)
    g = torch.Generator().manual_seed(1)
    heads = [(torch.randn(3, 512, generator=g), torch.zeros(3)) for _ in range(2)]
    counts = [[5, 1, 0], [0, 2, 9]]
    runs = []
    for _ in range(2):
        s = FedGen(GEN_SMALL, ctx)
        assert s.payload(0, None) == {} and s.state_dict() == {}
        m = [_fedgen_round(s, r, heads, counts) for r in range(3)]
        runs.append((s, m))
    (s, m), (s2, m2) = runs
    assert m == m2  # same seed: same generator, bit for bit
    assert m[2]["gen_teacher_loss"] < m[0]["gen_teacher_loss"]
    for k, v in s.generator.state_dict().items():
        assert torch.equal(v, s2.generator.state_dict()[k])
    sent = s.payload(3, None)["generator"]
    assert tensor_bytes(sent) == tensor_bytes(s.generator.state_dict())
    # the checkpointed state (generator and Adam moments) continues exactly
    restored = FedGen(GEN_SMALL, ctx)
    restored.load_state_dict(s.state_dict())
    assert _fedgen_round(restored, 3, heads, counts) == _fedgen_round(s, 3, heads, counts)


def test_fedgen_server_draws_labels_uniformly_among_the_held_ones(monkeypatch):
    import fedkd.strategies.fedgen as fedgen_mod

    drawn = []
    real = fedgen_mod.generator_teacher_loss

    def recording(feats, y, *rest):
        drawn.append(y.clone())
        return real(feats, y, *rest)

    monkeypatch.setattr(fedgen_mod, "generator_teacher_loss", recording)
    ctx = tiny_ctx(num_classes=3)
    s = FedGen(FedGenParams(gen_steps=20, gen_batch_size=64), ctx)
    g = torch.Generator().manual_seed(1)
    heads = [(torch.randn(3, 512, generator=g), torch.zeros(3)) for _ in range(2)]
    _fedgen_round(s, 0, heads, [[95, 0, 0], [3, 2, 0]])  # label 0: 98 samples, 1: 2, 2: none
    freq = torch.bincount(torch.cat(drawn), minlength=3).double() / (20 * 64)
    assert freq[2] == 0  # nobody holds label 2
    # uniform over labels 0 and 1 (in proportion to the counts, label 1 would be 2%)
    assert abs(freq[0] - 0.5) < 0.06 and abs(freq[1] - 0.5) < 0.06


def _declared_steps(strategy, cid, ctx, model, payload, labels, steps=20, batch=4):
    """A client with ``steps`` local steps of ``batch`` after the strategy's client_begin."""
    client = tiny_client(ctx, cid, 1, model, model, payload, labels)
    client.num_steps, client.batch_size, client.seed = steps, batch, 7
    strategy.client_begin(client)
    return client


def test_fedgen_client_term():
    ctx = tiny_ctx(num_classes=3)
    s = FedGen(FedGenParams(coef=10.0, gen_steps=2), ctx)
    g = torch.Generator().manual_seed(1)
    heads = [(torch.randn(3, 512, generator=g), torch.zeros(3))]
    _fedgen_round(s, 0, heads, [[4, 0, 4]])
    payload = s.payload(1, None)
    model = ctx.build_model()
    client = _declared_steps(s, 0, ctx, model, payload, [0, 2, 2, 0])
    d = client.declared
    assert d.shared["coef"].item() == pytest.approx(10 * 0.98**2)  # round 2: t = 2 (one-based)
    y_s = d.per_step["generated_labels"]
    assert y_s.shape == (20, 4)
    assert set(y_s.flatten().tolist()) == {0, 1, 2}  # every label, 1 not held here
    # labels and noise from the client's own seed; features are G's, computed once
    rng = torch.Generator().manual_seed(derive_seed(7, "fedgen"))
    assert torch.equal(y_s, torch.randint(3, (20, 4), generator=rng))
    noise = torch.rand(20, 4, 64, generator=rng)
    gen = FeatureGenerator(3, 512, 512, 64)
    gen.load_state_dict(payload["generator"])
    gen.eval()
    with torch.no_grad():
        z = gen(y_s.flatten(), noise.flatten(0, 1)).view(20, 4, -1)
    assert torch.allclose(d.per_step["generated"], z, rtol=1e-6, atol=1e-7)
    b = batch_of(client)
    got = local_loss_on(s, client, b, step=3)
    ce_gen = torch.nn.functional.cross_entropy(model.classifier(z[3]), y_s[3])
    assert got.item() == pytest.approx((b.ce() + 10 * 0.98**2 * ce_gen).item(), rel=1e-6)
    assert s.client_end(client)["label_counts"].tolist() == [2, 0, 2]
    # restricted to its own labels, a client never generates the class it lacks
    own = FedGen(FedGenParams(coef=10.0, gen_steps=2, sample_labels="client"), ctx)
    _fedgen_round(own, 0, heads, [[4, 0, 4]])
    own_client = _declared_steps(own, 0, ctx, model, own.payload(1, None), [0, 2, 2, 0])
    assert set(own_client.declared.per_step["generated_labels"].flatten().tolist()) == {0, 2}
    # round 1: no generator yet, plain CE and nothing declared
    first = tiny_client(ctx, 0, 0, model, model, {}, [0, 2, 2, 0])
    s.client_begin(first)
    assert not first.declared.per_step
    assert local_loss_on(s, first, b).item() == pytest.approx(b.ce().item())


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
