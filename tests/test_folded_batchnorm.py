"""The batched trainer's BatchNorm (``fedkd.engine.folding.FoldedBatchNorm2d``) against K
separate ``nn.BatchNorm2d`` layers, each on its client's samples alone: outputs, gradients,
running statistics and batch counts, with a client whose batch is short (its padding slots left
out) and a finished client (no samples: nothing moves). In float64, so the bounds are rounding's."""

import copy

import pytest
import torch
from torch import nn

from fedkd.engine.folding import FoldedBatchNorm2d

K, C, B = 3, 4, 5
COUNTS = [5, 3, 0]  # client 0 fills its batch, client 1's is short, client 2 has finished


@pytest.fixture
def norms():
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(0)
    bns = [nn.BatchNorm2d(C).train() for _ in range(K)]
    for bn in bns:
        with torch.no_grad():
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.5, 0.5)
            bn.running_mean.uniform_(-1, 1)
            bn.running_var.uniform_(0.5, 2)
            bn.num_batches_tracked.fill_(7)
    folded = FoldedBatchNorm2d(K, bns[0])
    folded.weight = nn.Parameter(torch.cat([bn.weight.detach() for bn in bns]))
    folded.bias = nn.Parameter(torch.cat([bn.bias.detach() for bn in bns]))
    folded.fill_buffers([{n: b.clone() for n, b in bn.named_buffers()} for bn in bns])
    valid = torch.zeros(B, K)
    for c, n in enumerate(COUNTS):
        valid[:n, c] = 1
    folded.slot_valid = valid
    yield bns, folded
    torch.set_default_dtype(before)


def test_each_client_normalises_over_its_own_samples_and_keeps_its_statistics(norms):
    bns, folded = norms
    before = [{n: b.clone() for n, b in bn.named_buffers()} for bn in bns]
    x = torch.randn(B, K * C, 6, 6, requires_grad=True)
    y = folded(x)
    assert torch.isfinite(y).all()
    own = [slice(c * C, (c + 1) * C) for c in range(K)]
    (sum(y[:n, own[c]].square().sum() for c, n in enumerate(COUNTS) if n)).backward()
    for c, n in enumerate(COUNTS):
        got = folded.client_buffers(c)
        if n == 0:  # finished: its statistics and count stay as they were
            for name, value in got.items():
                assert torch.equal(value, before[c][name]), name
            assert folded.weight.grad[own[c]].abs().max() == 0
            continue
        xc = x[:n, own[c]].detach().requires_grad_(True)
        want = bns[c](xc)
        torch.testing.assert_close(y[:n, own[c]], want, rtol=1e-12, atol=1e-12)
        want.square().sum().backward()
        torch.testing.assert_close(folded.weight.grad[own[c]], bns[c].weight.grad)
        torch.testing.assert_close(folded.bias.grad[own[c]], bns[c].bias.grad)
        torch.testing.assert_close(x.grad[:n, own[c]], xc.grad)
        assert not x.grad[n:, own[c]].any()  # a padding slot takes no gradient
        for name, value in got.items():
            torch.testing.assert_close(value, getattr(bns[c], name), rtol=1e-12, atol=0)
        assert int(got["num_batches_tracked"]) == 8


def test_a_whole_batch_is_pytorchs_batch_norm_and_equals_the_masked_form(norms):
    _, folded = norms
    folded.slot_valid = torch.ones(B, K)
    twin = copy.deepcopy(folded)
    twin.whole_batch = True
    x = torch.randn(B, K * C, 6, 6)
    torch.testing.assert_close(twin(x), folded(x), rtol=1e-12, atol=1e-12)
    for name, value in folded.state_dict().items():
        torch.testing.assert_close(twin.state_dict()[name], value, rtol=1e-12, atol=0)


def test_in_eval_mode_each_client_uses_its_running_statistics(norms):
    bns, folded = norms
    folded.eval()
    x = torch.randn(B, K * C, 6, 6)
    y = folded(x)
    for c, bn in enumerate(bns):
        torch.testing.assert_close(y[:, c * C : (c + 1) * C], bn.eval()(x[:, c * C : (c + 1) * C]))
