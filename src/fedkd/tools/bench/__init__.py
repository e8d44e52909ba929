"""Benchmarks (not tests): ``fedkd bench`` or ``python -m fedkd.tools.bench``. Every printed line
says what it timed; with ``--out DIR`` each figure is also appended to ``DIR/bench-results.jsonl``
(date, device, commit, what, img/s, command, details) and profiles are written there.

One benchmark a module:

0. ``ops``: ``--ops``, the kernels and host syncs one batched local step dispatches per
   strategy, and exit.
1. ``local_training``: the sequential trainer against a bare PyTorch loop on the same work.
2. ``round_engines``: one round's client training per engine (``--rounds-bench``).
3. ``table3``: table-3 runs through the full round loop (``--strategies``, ``--engine``), timed
   by the run loop's own figures (``Run.on_rounds_done``, each round's ``local_seconds``).
4. ``packed``: ``--pack K``, K table-3 runs sharing the device, one process each.
5. ``profile``: ``--profile``, a torch.profiler trace of one round per strategy and engine.
6. ``precision``: ``--precision-check``, best accuracy per precision on mnist5k over seeds.

``common`` holds what they share (the table-3 shape, the round clock, the results writer);
``command`` the command line.
"""
