"""What strategies and the engine both build on: seeds, preprocessing, per-client batch schedules
and evaluation. Nothing here imports a strategy or the engine, so imports flow one way:
runtime <- strategies <- engine."""
