"""FedAvg (McMahan et al., 2017): local cross-entropy, weighted parameter average."""

from fedkd.strategies.base import Strategy


class FedAvg(Strategy):
    name = "fedavg"
    paper = "McMahan et al., AISTATS 2017"
    summary = "Local cross-entropy; the server averages the client models (uniform or by n_k)."
