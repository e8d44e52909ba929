import warnings

import pytest
import torch
from torch import nn

from fedkd.models import MODELS, PROJECTION_DIM, FedModel, build_model

CIFAR = (3, 32, 32)
MNIST = (1, 28, 28)
SEQ_LEN = 16
VOCAB = 100


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def tokens(batch=3, seq_len=SEQ_LEN):
    x = torch.randint(1, VOCAB, (batch, seq_len))
    x[0, 5:] = 0  # padded row
    return x


def tiny(name, **kwargs):
    """A model and a small input batch for it."""
    torch.manual_seed(0)
    if name == "distilbert":
        return build_model(name, 4, (SEQ_LEN,), vocab_size=VOCAB, **kwargs), tokens()
    return build_model(name, 4, CIFAR, **kwargs), torch.randn(2, *CIFAR)


def norm(c: int) -> int:
    return 2 * c  # a norm layer's weight and bias


# ResNet-8: a 3x3 stem of 16 channels, a basic block per stage (16, 32, 64 channels; 1x1
# shortcuts where the width changes), bias-free convolutions, a linear head on 64 features
RESNET8 = (
    16 * 3 * 9 + norm(16)
    + 2 * (16 * 16 * 9 + norm(16))
    + 32 * 16 * 9 + 32 * 32 * 9 + 2 * norm(32) + 32 * 16 + norm(32)
    + 64 * 32 * 9 + 64 * 64 * 9 + 2 * norm(64) + 64 * 32 + norm(64)
    + 64 * 10 + 10
)  # fmt: skip
# FedAvg's CNN: 5x5 convolutions of 32 and 64 channels (28 -> 14 -> 7 after pooling), a 512 unit
# hidden layer, 10 outputs
CNN = (5 * 5 * 1 * 32 + 32) + (5 * 5 * 32 * 64 + 64) + (7 * 7 * 64 * 512 + 512) + (512 * 10 + 10)


def test_resnet8_parameter_count():
    assert RESNET8 == 78_042
    assert n_params(build_model("resnet8", 10, CIFAR)) == RESNET8


def test_cnn_parameter_count_mnist():
    assert CNN == 1_663_370
    assert n_params(build_model("cnn", 10, MNIST)) == CNN


def test_resnet8_and_cnn_take_mnist():
    x = torch.randn(2, *MNIST)
    for name in ("resnet8", "cnn"):
        assert build_model(name, 10, MNIST)(x).shape == (2, 10)


# resnet50 is checked once at 64x64 below: a second CPU pass would only slow the suite down
@pytest.mark.parametrize("name", ["resnet8", "cnn", "distilbert"])
def test_forward_shapes_and_features(name):
    model, x = tiny(name)
    model.eval()  # no dropout, so repeated passes agree
    assert isinstance(model, FedModel)
    assert isinstance(model.classifier, nn.Linear)
    expected_dim = {"resnet8": 64, "cnn": 512, "distilbert": 64}[name]
    assert model.feature_dim == expected_dim == model.classifier.in_features
    with torch.no_grad():
        logits = model(x)
        feats, logits2 = model.features_and_logits(x)
    assert logits.shape == (len(x), 4)
    assert feats.shape == (len(x), model.feature_dim)
    assert torch.allclose(logits, logits2, atol=1e-5)
    assert torch.allclose(model.classifier(feats), logits, atol=1e-5)
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("name", ["resnet8", "cnn", "distilbert"])
def test_projection_head(name):
    plain, x = tiny(name)
    model, _ = tiny(name, projection_head=True)
    model.eval()
    assert model.feature_dim == PROJECTION_DIM == model.classifier.in_features
    assert model.projection.l1.in_features == plain.feature_dim
    feats, logits = model.features_and_logits(x)
    assert feats.shape == (len(x), PROJECTION_DIM)
    assert logits.shape == (len(x), 4)
    assert model.backbone_features(x).shape == (len(x), plain.feature_dim)


def test_resnet50_at_64x64():
    torch.manual_seed(0)
    model = build_model("resnet50", 200, (3, 64, 64))
    assert isinstance(model, FedModel) and model.feature_dim == 2048
    with torch.no_grad():
        feats, logits = model.features_and_logits(torch.randn(2, 3, 64, 64))
        assert feats.shape == (2, 2048) and logits.shape == (2, 200)
        assert torch.allclose(model.classifier(feats), logits, atol=1e-5)
        assert torch.isfinite(logits).all()


def test_resnet50_projection_head():
    torch.manual_seed(0)
    model = build_model("resnet50", 5, (3, 16, 16), projection_head=True)
    feats, logits = model.features_and_logits(torch.randn(2, 3, 16, 16))
    assert feats.shape == (2, PROJECTION_DIM) and logits.shape == (2, 5)
    assert model.projection.l1.in_features == 2048


def test_group_vs_batch_norm():
    gn = build_model("resnet8", 10, CIFAR)
    bn = build_model("resnet8", 10, CIFAR, norm="batch")
    gn_layers = [m for m in gn.modules() if isinstance(m, nn.GroupNorm)]
    assert gn_layers and not any(isinstance(m, nn.BatchNorm2d) for m in gn.modules())
    assert all(m.num_channels // m.num_groups == 16 for m in gn_layers)
    assert sorted({m.num_groups for m in gn_layers}) == [1, 2, 4]
    assert any(isinstance(m, nn.BatchNorm2d) for m in bn.modules())
    assert not any(isinstance(m, nn.GroupNorm) for m in bn.modules())
    assert n_params(bn) == 78_042  # same affine parameters; running stats are buffers
    assert bn(torch.randn(2, *CIFAR)).shape == (2, 10)
    r50 = build_model("resnet50", 10, (3, 64, 64), norm="batch")
    assert any(isinstance(m, nn.BatchNorm2d) for m in r50.modules())


def test_unknown_names_raise():
    assert MODELS == ("resnet8", "resnet50", "cnn", "distilbert")
    with pytest.raises(ValueError, match="'vgg'.*resnet8, resnet50, cnn, distilbert"):
        build_model("vgg", 10, CIFAR)
    with pytest.raises(ValueError, match="'layer'.*group, batch"):
        build_model("resnet8", 10, CIFAR, norm="layer")
    with pytest.raises(ValueError, match="input_shape"):
        build_model("cnn", 10, (28, 28))


@pytest.mark.parametrize("name", ["resnet8", "cnn", "distilbert"])
def test_same_seed_same_init(name):
    a, _ = tiny(name)
    b, _ = tiny(name)
    torch.manual_seed(1)
    if name == "distilbert":
        c = build_model(name, 4, (SEQ_LEN,), vocab_size=VOCAB)
    else:
        c = build_model(name, 4, CIFAR)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert sa.keys() == sb.keys()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)


def test_distilbert_offline_from_config(tmp_path):
    torch.manual_seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = build_model(
            "distilbert",
            3,
            (SEQ_LEN,),
            vocab_size=VOCAB,
            pretrained=str(tmp_path / "no-such-model"),
            text_config={"n_layers": 1},
        )
    assert any("not available locally" in str(w.message) for w in caught)
    assert model.encoder.config.n_layers == 1
    assert model.encoder.config.vocab_size == VOCAB
    model.eval()
    x = tokens()
    x[1] = 0  # an all-padding row must still give finite outputs
    logits = model(x)
    assert logits.shape == (3, 3) and torch.isfinite(logits).all()
    # extra trailing padding is masked out, so it does not change the result
    padded = torch.cat([x, torch.zeros(3, 4, dtype=x.dtype)], dim=1)
    assert torch.allclose(model(padded), logits, atol=1e-5)


def test_distilbert_argument_errors():
    with pytest.raises(ValueError, match="vocab_size"):
        build_model("distilbert", 2, (SEQ_LEN,))
    with pytest.raises(ValueError, match="bogus"):
        build_model("distilbert", 2, (SEQ_LEN,), vocab_size=VOCAB, text_config={"bogus": 1})
    with pytest.raises(ValueError, match="max_position_embeddings"):
        build_model(
            "distilbert",
            2,
            (SEQ_LEN,),
            vocab_size=VOCAB,
            text_config={"max_position_embeddings": 8},
        )


def test_narrow_cnn_and_he_head_init_are_model_options():
    from fedkd.models import build_model

    paper = build_model("cnn", 10, (1, 28, 28))
    assert sum(p.numel() for p in paper.parameters()) == 1_663_370  # FedAvg's CNN unchanged
    narrow = build_model("cnn", 10, (1, 28, 28), channels=[16, 32], hidden=128)
    assert narrow.conv[3].out_channels == 32 and narrow.feature_dim == 128
    torch.manual_seed(0)
    default = build_model("cnn", 10, (1, 28, 28), projection_head=True)
    torch.manual_seed(0)
    he = build_model("cnn", 10, (1, 28, 28), projection_head=True, head_init="he")
    # He-normal: std sqrt(2 / fan_in) for l1; PyTorch's default is uniform with std 1/sqrt(3 fan_in)
    fan_in = he.projection.l1.in_features
    assert abs(he.projection.l1.weight.std().item() - (2 / fan_in) ** 0.5) < 0.005
    assert default.projection.l1.weight.std().item() < 0.7 * (2 / fan_in) ** 0.5
    assert torch.count_nonzero(he.projection.l1.bias) == 0
    with pytest.raises(ValueError, match="head_init='xavier' is unknown"):
        build_model("cnn", 10, (1, 28, 28), head_init="xavier")
    with pytest.raises(ValueError, match="cnn only"):
        build_model("resnet8", 10, (3, 32, 32), hidden=64)
