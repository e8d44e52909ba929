"""The engine: the round loop, client training, evaluation and checkpoints."""
