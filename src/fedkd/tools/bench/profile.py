"""``--profile``: a torch.profiler trace of one round after the warm-up (with
``--profile-epochs`` local epochs, so the trace stays small) per strategy and engine, written to
``--out`` as ``profile-<strategy>-<engine>.json.gz`` (chrome://tracing, Perfetto), with the top
operators printed."""

from __future__ import annotations

from pathlib import Path

import torch

from fedkd.tools.bench.common import RoundClock, synthetic_table3_data, table3_spec


def profile_round(args, device: torch.device, strategy: str, engine: str, out: Path) -> Path:
    """A torch.profiler trace of the round after the warm-up, with ``--profile-epochs``."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    prof = profile(activities=activities)

    def at_round_end(done: int) -> None:
        if done == args.warmup_rounds:
            prof.start()
        elif done == args.warmup_rounds + 1:
            prof.stop()

    clock = RoundClock(device, at_round_end)
    spec = table3_spec(strategy, engine, args, device, local_epochs=args.profile_epochs)
    clock.run_rounds(spec, synthetic_table3_data(args), args.warmup_rounds + 1)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"profile-{strategy}-{engine}.json.gz"
    prof.export_chrome_trace(str(path))
    sort = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=sort, row_limit=args.profile_rows), flush=True)
    return path
