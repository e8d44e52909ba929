"""What each run spec key means, as `fedkd train --help` says it (fedkd.config.RunSpec)."""

RUN_KEY_HELP = {
    "model": "auto (the paper's model for the dataset), resnet8, resnet50, cnn or distilbert",
    "strategy": "strategy name (see `fedkd strategies`)",
    "params": "strategy hyperparameters as a YAML mapping, e.g. '{gamma: 0.2, buffer: 5}'",
    "clients": "number of clients",
    "partition": "dirichlet-equal (FedDF/FedGKD, equal sizes), dirichlet (min size 10), shards, iid",
    "alpha": "Dirichlet concentration (dirichlet schemes; smaller = more heterogeneous)",
    "shards": "shards per client (partition=shards)",
    "participation": "C: fraction of clients sampled each round, in (0, 1]",
    "rounds": "communication rounds",
    "local_epochs": "local epochs per round",
    "batch_size": "local batch size",
    "optimizer": "sgd or adam",
    "lr": "local learning rate",
    "lr_decay": "the learning rate's factor per round: round r trains at lr * lr_decay^(r-1); 1 keeps "
    "it (FedNTD: 0.99)",
    "momentum": "SGD momentum",
    "weight_decay": "weight decay",
    "grad_clip": "max gradient norm (null disables clipping)",
    "augment": "auto (crop+flip on colour images), none, crop-flip",
    "cutout": "Cutout: the even side in pixels of a square blanked at a random centre in each local "
    "training image; 0: none (FedNTD: 16)",
    "seed": "run seed: data split, partition, initialisation, client sampling, shuffling",
    "device": "auto (CUDA when present, else CPU), cpu, cuda, mps",
    "data_root": "directory holding real datasets (default $FEDKD_DATA or ./data)",
    "partition_file": "a partition Parquet written by `fedkd partition` (default: compute it)",
    "eval_local": "also evaluate each client's local model before aggregation",
    "precision": "fp32 (IEEE float32: TF32 off on GPUs), tf32 (TF32 convolutions and matmuls on a "
    "GPU; fp32 on a CPU), or bf16 (autocast in local training)",
    "compile": "torch.compile the sequential trainer's model (a run with it trains "
    "sequentially): none, default, reduce-overhead (CUDA graphs)",
    "deterministic": "true: deterministic GPU kernels, so repeated GPU runs end bit-identical "
    "(CPU runs are bit-identical either way)",
    "engine": "local training: auto (batched on CUDA, sequential on a CPU), sequential, batched "
    "(on CUDA with CUDA graphs), batched-eager (without), batched-compiled (graphs and the "
    "compiled step)",
    "memory_format": "image tensor layout: auto (channels_last on a CPU with the sequential "
    "engine), contiguous, channels_last",
    "stop_at_acc": "end the run once its test accuracy reaches this (0-1); null: never",
    "classifier_init": "pytorch (nn.Linear's own, as the authors' code) or normal (N(0, 0.01))",
    "weight_decay_exempt": "block-norms (the ResNets' stem and block norms, as the authors' "
    "code) or none (every parameter decayed)",
    "bn_running_stats": "average (FedAvg averages BatchNorm's running statistics) or "
    "last-client (the round's last client's, as the authors' code)",
    "model_options": "model options as a YAML mapping, e.g. '{norm: batch}'",
    "dataset_options": "dataset loader options as a YAML mapping, e.g. '{tokenizer: word, max_len: 64}'",
}
