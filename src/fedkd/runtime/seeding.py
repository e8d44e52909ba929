"""Seeds derived from the run seed and a purpose, so each random draw depends only on its key."""

from __future__ import annotations

import hashlib

import numpy as np


def derive_seed(*key: object) -> int:
    """A 63-bit seed from any tuple of ints/strings, e.g. (seed, "client", round, client_id)."""
    digest = hashlib.sha256(repr(key).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def sample_clients(seed: int, round: int, num_clients: int, participation: float) -> list[int]:
    """The clients of round ``round`` (0-based): a function of (seed, round) alone, so every
    strategy with the same seed sees the same clients in the same round."""
    m = clients_a_round(num_clients, participation)
    rng = np.random.default_rng(derive_seed(seed, "sample", round))
    return sorted(int(c) for c in rng.choice(num_clients, size=m, replace=False))


def clients_a_round(num_clients: int, participation: float) -> int:
    """How many clients a round trains: C x K rounded half up (2.5 -> 3), at least one. The one
    rule for the engine's draw, the run's record and the cluster runtime estimate."""
    return max(1, round_half_up(participation * num_clients))


def round_half_up(x: float) -> int:
    return int(np.floor(x + 0.5 + 1e-9))
