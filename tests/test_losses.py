import math

import pytest
import torch

from fedkd.losses import kd_kl, soft_cross_entropy


def test_kd_kl_matches_hand_computed_kl():
    # teacher p = softmax([0, ln 3]) = (1/4, 3/4); student q = (1/2, 1/2)
    teacher = torch.tensor([[0.0, math.log(3.0)]])
    student = torch.tensor([[0.0, 0.0]])
    expected = 0.25 * math.log(0.25 / 0.5) + 0.75 * math.log(0.75 / 0.5)
    assert kd_kl(student, teacher).item() == pytest.approx(expected, rel=1e-6)
    assert kd_kl(teacher, teacher).item() == pytest.approx(0.0, abs=1e-7)


def test_kd_kl_temperature_and_reduction():
    s = torch.tensor([[1.0, 2.0, 0.0], [0.5, 0.0, 0.0]])
    t = torch.tensor([[0.0, 1.0, 3.0], [0.0, 0.0, 2.0]])
    per = kd_kl(s, t, reduction="none")
    assert per.shape == (2,)
    assert kd_kl(s, t).item() == pytest.approx(per.mean().item())
    t2 = kd_kl(s, t, temperature=2.0, reduction="none")
    manual = 4 * torch.nn.functional.kl_div(
        torch.log_softmax(s / 2, 1), torch.softmax(t / 2, 1), reduction="none"
    ).sum(1)
    assert torch.allclose(t2, manual, atol=1e-6)


def test_kd_kl_gradient_flows_to_student_only():
    s = torch.zeros(1, 3, requires_grad=True)
    t = torch.tensor([[1.0, 0.0, 0.0]], requires_grad=True)
    kd_kl(s, t).backward()
    assert s.grad is not None and t.grad is None


def test_soft_cross_entropy_by_hand():
    """Per sample -sum_k q_k log p_k. The student is not uniform: with p uniform every target
    gives log 2, and neither the targets nor their order would be checked."""
    q = torch.tensor([[0.25, 0.75], [0.5, 0.5]], dtype=torch.float64)
    s = torch.tensor([[0.0, math.log(3.0)], [0.0, 0.0]], dtype=torch.float64)  # p = (1/4, 3/4)
    expected = [-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)), math.log(2.0)]
    assert soft_cross_entropy(s, q).tolist() == pytest.approx(expected, rel=1e-12)
