"""How far local SGD with heavy-ball momentum moves per unit gradient (shared by scaffold and
fednova)."""

from __future__ import annotations


def effective_steps(tau: int, rho: float) -> float:
    """a = (tau - rho (1 - rho^tau) / (1 - rho)) / (1 - rho): the sum over tau local steps of the
    total coefficient each gradient receives in SGD with momentum rho (torch's heavy ball,
    no dampening). A constant gradient g moves the weights by lr * a * g; a = tau when rho = 0.
    This is FedNova's a_i (Wang et al., 2020; NIID-Bench's ``a_i``)."""
    if rho == 0:
        return float(tau)
    return (tau - rho * (1.0 - rho**tau) / (1.0 - rho)) / (1.0 - rho)


def local_momentum(spec) -> float:
    """The heavy-ball momentum of the engine's local optimizer (none for Adam)."""
    return float(spec.momentum) if spec.optimizer == "sgd" else 0.0
