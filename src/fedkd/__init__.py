"""fedkd: reproduce federated knowledge-distillation papers end to end."""

__version__ = "0.1.0"
