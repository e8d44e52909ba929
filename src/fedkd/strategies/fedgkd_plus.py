"""FedGKD+ (Yao et al., Sec. 5.1): FedGKD on the model with MOON's projection head.

Same objective and hyperparameters as fedgkd; only the network differs (a 2-layer MLP projection
head, output dim 256, before the classifier). The paper keeps BatchNorm in ResNet-50 for fedgkd+
and moon (GroupNorm with the head did not converge on Tiny-ImageNet); that is a model option
(model_options={"norm": "batch"}) chosen in the run config, not here.
"""

from __future__ import annotations

from fedkd.strategies.base import Traits
from fedkd.strategies.fedgkd import FedGKD


class FedGKDPlus(FedGKD):
    name = "fedgkd+"
    summary = "fedgkd with a 2-layer MLP projection head (out dim 256) before the classifier."
    uses_projection_head = True
    traits = Traits(extra_information="none", proxy_data=False, modifies_model=True)
