"""FedGen's method: its loss terms against hand-computed values, the coefficient's schedule, the
generator's server training and the client term, on the tiny harness of test_strategy_baselines."""

import math

import pytest
import torch

from fedkd.engine.sequential import local_loss_on
from fedkd.runtime.seeding import derive_seed
from fedkd.strategies import get_strategy_class
from fedkd.strategies.base import (
    ClientUpdate,
    tensor_bytes,
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
from test_strategy_baselines import LN2, batch_of, tiny_client, tiny_ctx


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
    per_sample = (0.75 * ce0 + 0.0 * LN2) / 2 + (0.25 * LN2 + 1.0 * LN2) / 2
    got = generator_teacher_loss(feats, y, w, bias, lw, "per-sample")
    assert got.item() == pytest.approx(per_sample, rel=1e-6)
    # FedGen's code: each client's mean CE times the mean of its weights over the batch
    batch = (ce0 + LN2) / 2 * (0.75 + 0.0) / 2 + (LN2 + LN2) / 2 * (0.25 + 1.0) / 2
    got = generator_teacher_loss(feats, y, w, bias, lw)
    assert got.item() == pytest.approx(batch, rel=1e-6)
    assert abs(batch - per_sample) > 0.05  # the two weightings differ here


def test_the_default_teacher_loss_is_fedgen_codes_broadcast_and_ones_make_the_two_agree():
    """FedGen's train_generator (and the FedGKD authors' master_fedgen.py), literally:
    torch.mean(NLLLoss(reduce=False)(log_softmax(logits_k), y) * weight) with weight
    label_weights[y][:, k].reshape(-1, 1), whose product broadcasts (B,) by (B, 1) to (B, B)."""
    g = torch.Generator().manual_seed(0)
    b, c, k, d = 6, 4, 3, 5
    feats = torch.randn(b, d, generator=g, dtype=torch.float64)
    y = torch.randint(0, c, (b,), generator=g)
    heads = torch.randn(k, c, d, generator=g, dtype=torch.float64)
    biases = torch.randn(k, c, generator=g, dtype=torch.float64)
    nll = torch.nn.NLLLoss(reduction="none")
    for counts, agree in ((torch.randint(0, 9, (k, c), generator=g), False),
                          (torch.ones(k, c, dtype=torch.long), True)):  # fmt: skip
        lw = teacher_label_weights(counts, torch.float64)
        code = sum(
            torch.mean(nll(torch.log_softmax(feats @ heads[u].T + biases[u], 1), y)
                       * lw[y][:, u].reshape(-1, 1))
            for u in range(k)
        )  # fmt: skip
        got = generator_teacher_loss(feats, y, heads, biases, lw)
        assert got.item() == pytest.approx(code.item(), rel=1e-12)
        other = generator_teacher_loss(feats, y, heads, biases, lw, "per-sample")
        assert (other.item() == pytest.approx(code.item(), rel=1e-12)) is agree


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


def test_a_generator_batch_of_one_is_refused_before_training():
    """The generator's BatchNorm1d cannot train on one sample (and the diversity loss of one
    sample is a constant): a batch of 1 is refused when the configuration is read, and the
    smallest batch allowed trains."""
    errors = FedGen.param_value_errors({"gen_batch_size": 1}, "cifar10", "resnet8")
    assert len(errors) == 1 and "params.gen_batch_size=1 must be an integer >= 2" in errors[0]
    ctx = tiny_ctx(num_classes=3)
    s = FedGen(FedGenParams(gen_steps=2, gen_batch_size=2, hidden_dim=16), ctx)
    heads = [(torch.randn(3, 512, generator=torch.Generator().manual_seed(1)), torch.zeros(3))]
    out = _fedgen_round(s, 0, heads, [[1, 1, 1]])
    assert math.isfinite(out["gen_teacher_loss"]) and math.isfinite(out["gen_diversity_loss"])


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
