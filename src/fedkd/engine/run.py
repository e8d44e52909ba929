"""The round loop of one federated run, with per-round metrics, checkpoints and resumption.

The set-up (data, partition, model, strategy) and the run.json record are
``fedkd.engine.run_setup``; what is written to the run directory, ``fedkd.engine.run_outputs``.
"""

from __future__ import annotations

import errno
import math
import time
import weakref
from collections.abc import Callable

import numpy as np

from fedkd.digests import DigestMismatch, check_record_seal, recorded_metrics_sha256
from fedkd.engine.checkpoint import (
    CheckpointCorruptError,
    check_plain,
    load_checkpoint,
    save_checkpoint,
)
from fedkd.engine.client import DivergedError, train_clients
from fedkd.engine.compiled_step import first_line
from fedkd.engine.reproducibility import capture_rng, restore_rng
from fedkd.engine.run_outputs import (
    RunConflictError,
    RunLock,
    fmt_seconds,
    remove_stale_temporaries,
    summarize,
    target_reached,
    write_json,
    write_metrics,
)
from fedkd.engine.run_setup import RunSetup
from fedkd.engine.running_stats import global_buffers
from fedkd.files import (
    CHECKPOINT,
    METRICS,
    RUN_JSON,
    MetricsError,
    read_metrics_table,
    read_run_record,
    refuse_link,
)
from fedkd.runtime.evaluate import evaluate
from fedkd.runtime.seeding import sample_clients
from fedkd.strategies.base import tensor_bytes


def _partition_text(spec) -> str:
    """How the run splits its data, as its log's first line says it: ``dirichlet-equal alpha
    0.5``, ``shards 2 a client``, ``iid``."""
    if spec.alpha is not None:
        return f"{spec.partition} alpha {spec.alpha}"
    if spec.shards is not None:
        return f"{spec.partition} {spec.shards} a client"
    return spec.partition


class Run(RunSetup):
    """One federated run: set up data, partition, model and strategy (``prepare``); then loop
    over rounds (``run``)."""

    _metrics_damage: str | None = None  # a finished run's damaged metrics, once logged
    _rounds_checkpointed: int | None = None  # the rounds the checkpoint holds, once known
    _recording = False  # whether this process has written run.json for this attempt
    _state: tuple[str, dict] = ("running", {})  # run.json's status and its fields, as last written
    # called with (rounds done, that round's metrics row) as the loop begins (row None) and after
    # each round's metrics and checkpoint are written: a benchmark's clock (fedkd.tools.bench)
    on_rounds_done: Callable[[int, dict | None], None] | None = None

    # ------------------------------------------------------------------ checkpoint
    def _checkpoint_state(self, round_done: int, rows: list[dict]) -> dict:
        return {
            "spec_hash": self.spec.hash(),
            "round_done": round_done,
            "global": self.global_model.state_dict(),
            "strategy": self._strategy_state(),
            "rows": rows,
            "rng": capture_rng(self.device),
        }

    def _strategy_state(self) -> dict:
        """The strategy's state_dict(), refused as the user's to fix where a checkpoint cannot
        hold it (a deque, an object of its own): checked before the first round as well."""
        state = self.strategy.state_dict()
        try:
            check_plain(state, "its state_dict()")
        except TypeError as exc:
            raise ValueError(
                f"strategy {self.spec.strategy!r}: {exc}; return only these from state_dict (a "
                "deque as a list, an object as a dict of them) and rebuild the objects in "
                "load_state_dict"
            ) from None
        return state

    def _restore(self, state: dict) -> tuple[int, list[dict]]:
        if state.get("spec_hash") != self.spec.hash():
            raise RunConflictError(
                f"checkpoint {self.out / CHECKPOINT} belongs to a different run spec "
                f"({state.get('spec_hash')} vs {self.spec.hash()}); use another output directory, "
                f"or delete the checkpoint to start this spec from round 0"
            )
        self.global_model.load_state_dict(state["global"])
        self.strategy.load_state_dict(state["strategy"])
        restore_rng(state["rng"], self.device)
        return state["round_done"], list(state["rows"])

    # ------------------------------------------------------------------ main loop
    def _finished_record(self) -> dict | None:
        """The record of this run when its directory already holds it finished (said in the
        log), else None; refuses a directory that holds another spec's run."""
        spec, run_json = self.spec, self.out / RUN_JSON
        if not run_json.exists():
            return None
        prev = read_run_record(run_json)
        if prev.get("spec_hash") != spec.hash():
            from fedkd.config import spec_differences

            diff = spec_differences(prev.get("spec") or {}, spec)
            what = "; ".join(diff)  # never empty: spec_differences always names a reason
            raise RunConflictError(
                f"{self.out} holds a run with a different spec ({what}; hash "
                f"{prev.get('spec_hash')} there, {spec.hash()} now); choose another output "
                "directory, or run with the values recorded in its run.json"
            )
        if prev.get("status") not in ("complete", "diverged"):
            return None
        try:  # edited or damaged after the run: made again, with its metrics, from the checkpoint
            check_record_seal(prev)
        except DigestMismatch as exc:
            again = (f"rebuilding it from {CHECKPOINT}" if (self.out / CHECKPOINT).exists()
                     else f"no {CHECKPOINT} to rebuild it from: training the run again")  # fmt: skip
            self.log(f"[fedkd] {run_json} is damaged or was edited after the run ({exc}); {again}")
            return None
        metrics = self.out / METRICS
        if not (metrics.exists() or metrics.is_symlink()):
            return None  # deleted (as the workflow does): written again from the checkpoint
        try:
            read_metrics_table(
                metrics, rounds_done=prev.get("rounds_done"), sha256=recorded_metrics_sha256(prev)
            )
        except MetricsError as exc:
            if not exc.rebuildable or not (self.out / CHECKPOINT).exists():
                raise  # a directory or FIFO in its place, or nothing to rebuild it from
            if self._metrics_damage != exc.problem:  # said once, not again under the lock
                self._metrics_damage = exc.problem
                self.log(f"[fedkd] {exc.problem}; rebuilding it from {CHECKPOINT}")
            return None
        self.log(f"[fedkd] {self.out}: already {prev['status']}, nothing to do")
        return prev

    def run(self, stop_after_round: int | None = None) -> dict:
        """Train to the last round (or stop after ``stop_after_round`` rounds, for tests).
        Resumes from the checkpoint in the output directory if there is one. The directory is
        locked (``RunLock``) while this process writes it. A directory that is a symbolic link is
        refused: training would replace the files of the folder it points to.

        run.json says what is true while the run lasts: written at the start, after every round,
        when the engine's record changes (a compile's outcome, a fallback to the eager step),
        and at the end: complete or diverged, stopped (Ctrl-C, a full disk) or failed (any other
        error, named), with the rounds the checkpoint holds."""
        refuse_link(self.out)
        self._recording = False
        if (prev := self._finished_record()) is not None:
            return prev
        try:
            self.prepare()
        except KeyboardInterrupt:
            self.log(f"[fedkd] {self.out}: stopped while setting up; run the same command again")
            raise
        # only now, with the data, partition, model and strategy checked: a run that fails its
        # checks leaves no output folder behind
        self.out.mkdir(parents=True, exist_ok=True)
        with RunLock(self.out) as lock:
            if lock.unsupported:
                self.log(
                    f"[fedkd] warning: {self.out} cannot be locked ({lock.unsupported}); a "
                    f"second run on this directory would not be refused"
                )
            else:  # locked: no other process is writing here, so its temporaries are litter
                removed = remove_stale_temporaries(self.out)
                if removed:
                    self.log(
                        f"[fedkd] {self.out}: removed {len(removed)} temporary file(s) an "
                        f"interrupted write left ({', '.join(removed)})"
                    )
            # another process may have finished this run while this one prepared
            if (prev := self._finished_record()) is not None:
                return prev
            try:
                return self._train(stop_after_round)
            except KeyboardInterrupt as exc:  # Ctrl-C (or SIGTERM, as fedkd train has it): a
                # stop asked for, not a crash
                why = str(exc) or "interrupted (SIGINT, e.g. Ctrl-C)"
                done = self._record_end("stopped", why)
                when = f"after round {done}" if done else "before round 1"
                self.log(
                    f"[fedkd] {self.out}: stopped {when} of {self.spec.rounds}; run the same "
                    f"command again to resume"
                )
                raise
            except Exception as exc:
                if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
                    self._record_end("stopped", f"no space left on device ({exc})")
                elif self._recording:  # not over a record this attempt has not written
                    self._record_end("failed", first_line(exc))
                raise

    _earlier_attempts: list = []  # what trained the rounds this attempt resumed after

    def _write_record(self, status: str, extra: dict) -> dict:
        """run.json rewritten (atomically) with ``status`` and ``extra``, remembered for the
        rewrites the engine asks for (``_engine_changed``); returns the record written."""
        record = self._run_record(status, extra)
        write_json(self.out / RUN_JSON, record)
        self._state, self._recording = (status, extra), True
        return record

    def _engine_changed(self) -> None:
        """The trainer changed the engine record (run.json's ``engine``): written at once."""
        self._write_record(*self._state)

    def _record_end(self, status: str, error: str) -> int:
        """run.json says the run stopped or failed, why, and the rounds done (those the
        checkpoint holds), not "running" for ever, if the disk takes it (after a full disk the
        failed write has removed its temporary file, which may be room enough; where it is not,
        the log says what the checkpoint holds, and the next start records it). Returns the
        rounds done."""
        known = self._rounds_checkpointed  # None: stopped before the checkpoint was read
        try:  # a stop between a checkpoint's rename and the count's update: the file says
            done = len(load_checkpoint(self.out / CHECKPOINT)["rows"])
        except (OSError, CheckpointCorruptError, KeyError, TypeError):
            done = 0
        if known is not None:
            done = max(done, known)
        try:
            self._write_record(status, {"rounds_done": done, "error": error})
        except Exception as exc:  # noqa: BLE001 - the error being handled is what is raised
            now, fields = self._state
            said = (
                f"{now}, {fields.get('rounds_done')} round(s) done"
                if self._recording
                else "what it said before this attempt"
            )
            self.log(
                f"[fedkd] {self.out / RUN_JSON} could not be updated ({exc}): it says {said}, "
                f"not {status}; the checkpoint holds {done} round(s), and the same command "
                "resumes from there once the file can be written"
            )
        return done

    def _train(self, stop_after_round: int | None) -> dict:
        spec = self.spec
        ckpt_path = self.out / CHECKPOINT
        start, rows = 0, []
        if ckpt_path.exists():
            start, rows = self._restore(load_checkpoint(ckpt_path))
            self.log(f"[fedkd] resuming {self.out} after round {start}/{spec.rounds}")
        self._rounds_checkpointed = start
        if (self.out / RUN_JSON).exists():  # an earlier attempt's: its engine outcome carries on
            prev = read_run_record(self.out / RUN_JSON)
            self.env.earlier_engine = prev.get("engine")
            self._earlier_attempts = earlier_attempts(prev, start)
        self._strategy_state()  # a state no checkpoint can hold: said before any round trains
        now = self._write_record("running", {"rounds_done": start})
        self.env.on_engine_change = _weak_call(self._engine_changed)
        if start and (changes := changed_arithmetic(self._earlier_attempts, now)):
            self.log(f"[fedkd] warning: resuming {self.out} after round {start} {changes}")
        self.log(
            f"[fedkd] {spec.strategy} on {spec.dataset} ({self.model_name}, {len(self.dataset.train)} "
            f"train samples), {spec.clients} clients, {_partition_text(spec)}, C {spec.participation}, "
            f"{spec.rounds} rounds, device {self.device}"
        )
        status, error = "running", None
        last = spec.rounds if stop_after_round is None else min(spec.rounds, stop_after_round)
        t_run = time.perf_counter()
        reached = target_reached(spec, rows)  # a resumed run may have reached it already
        if self.on_rounds_done is not None:
            self.on_rounds_done(start, None)
        for r in range(start, last):
            if reached:
                break
            t0 = time.perf_counter()
            try:
                row = self._round(r)
            except FloatingPointError as exc:  # DivergedError, or a strategy's non-finite value
                status, error = "diverged", str(exc)
                self.log(f"[fedkd] round {r + 1}: diverged ({exc}); stopping, metrics so far kept")
                break
            row["seconds"] = time.perf_counter() - t0
            rows.append(row)
            write_metrics(self.out / METRICS, rows)
            save_checkpoint(ckpt_path, self._checkpoint_state(r + 1, rows))
            self._rounds_checkpointed = r + 1
            self._write_record("running", {"rounds_done": r + 1})
            if self.on_rounds_done is not None:
                self.on_rounds_done(r + 1, row)
            reached = target_reached(spec, rows)
            done = r + 1 - start
            eta = (time.perf_counter() - t_run) / done * (spec.rounds - r - 1)
            self.log(
                f"[fedkd] round {r + 1}/{spec.rounds}  acc {row['test_acc']:.4f}  "
                f"loss {row['test_loss']:.4f}  {row['seconds']:.1f}s  ETA {fmt_seconds(eta)}"
            )
        self.env.release()  # the trainer's buffers (and CUDA graphs) go with the run's rounds
        if status == "running" and (len(rows) == spec.rounds or reached):
            status = "complete"
        if reached:
            self.log(f"[fedkd] reached stop_at_acc {spec.stop_at_acc} in round {len(rows)}")
        # always, from the rows: a run resumed at its last round (or past its target) trains no
        # round, and the workflow may have deleted the metrics of an interrupted or forced job
        write_metrics(self.out / METRICS, rows)
        summary = summarize(rows, self.dataset.num_classes)
        if summary.get("collapsed"):
            self.log(
                f"[fedkd] collapsed: the global model never got meaningfully above chance "
                f"(best acc {summary['best_acc']:.4f}, chance {summary['chance_acc']:.4f})"
            )
        record = self._run_record(
            status,
            {
                "rounds_done": len(rows),
                # rounds not trained because stop_at_acc was reached
                "rounds_saved": spec.rounds - len(rows) if reached else 0,
                "summary": summary,
                "error": error,
            },
        )
        write_json(self.out / RUN_JSON, record)
        self._state = (status, record)
        return record

    def _round(self, r: int) -> dict:
        spec = self.spec
        selected = sample_clients(spec.seed, r, spec.clients, spec.participation)
        payload = self.strategy.payload(r, self.global_model)
        t_local = time.perf_counter()
        updates, local_acc = train_clients(
            r, selected, self.global_model, payload, self.strategy, self.env, spec.eval_local
        )
        # ends with the read of the clients' losses, which waits for the device's training
        local_seconds = time.perf_counter() - t_local
        new_state = self.strategy.aggregate(r, self.global_model, updates)
        new_state = global_buffers(new_state, updates, self.global_model, spec.bn_running_stats)
        self.global_model.load_state_dict(new_state)
        server_metrics = self.strategy.server_update(r, self.global_model, updates) or {}
        stats = evaluate(
            self.global_model, self.dataset.test, self.preprocess, self.dataset.num_classes
        )
        if not math.isfinite(stats["loss"]):
            raise DivergedError(
                f"the global model's test loss is {stats['loss']} after round {r + 1}"
            )
        # the validation split too: model selection without the test set picks the round
        # that is best on it (fedkd.metrics.val_selected_accuracy)
        val = (
            evaluate(self.global_model, self.dataset.val, self.preprocess, self.dataset.num_classes)
            if len(self.dataset.val)
            else {"acc": float("nan"), "loss": float("nan")}
        )
        sent = len(selected) * (self.model_bytes + tensor_bytes(payload))
        received = sum(self.model_bytes + tensor_bytes(u.extras) for u in updates)
        row = {
            "round": r + 1,
            "test_acc": stats["acc"],
            "test_loss": stats["loss"],
            "val_acc": val["acc"],
            "val_loss": val["loss"],
            "class_acc": stats["class_acc"],
            "train_loss": float(np.mean([u.train_loss for u in updates])),
            "local_acc": float(np.mean(local_acc)) if local_acc else float("nan"),
            "bytes_sent": int(sent),
            "bytes_received": int(received),
            "clients": selected,
            "local_seconds": local_seconds,
        }
        for key, value in server_metrics.items():
            row[f"server_{key}"] = value
        return row


def _weak_call(method: Callable[[], None]) -> Callable[[], None]:
    """``method`` called through a weak reference: the trainer that holds it keeps no run
    alive."""
    ref = weakref.WeakMethod(method)

    def call() -> None:
        bound = ref()
        if bound is not None:
            bound()

    return call


# what run.json says of the process that trained a run's rounds, kept per attempt when resumed
ATTEMPT_KEYS = ("device", "precision", "engine", "determinism", "versions", "command", "cwd")


def earlier_attempts(prev: dict, start: int) -> list[dict]:
    """run.json's ``earlier_attempts``: per earlier attempt that trained rounds this one keeps
    (the checkpoint's ``start``), the round it trained through and its device, precision, engine,
    determinism (memory format included), versions, command and working directory. A run resumes
    on any device: the record's own keys are the last attempt's, these the earlier rounds'."""
    attempts = [a for a in prev.get("earlier_attempts") or [] if isinstance(a, dict)]
    attempts = [a for a in attempts if isinstance(a.get("rounds_through"), int)]
    attempts = [a for a in attempts if a["rounds_through"] <= start]  # beyond the checkpoint
    through = attempts[-1]["rounds_through"] if attempts else 0
    if start > through:
        attempts.append({"rounds_through": start, **{k: prev.get(k) for k in ATTEMPT_KEYS}})
    return attempts


# what an attempt computed with beyond its spec (which a resume keeps): (what, how it is read
# from a run record, what restores it); another value gives other float32 numbers
ARITHMETIC = (
    ("torch threads", lambda r: r["device"]["threads"], "with OMP_NUM_THREADS={}"),
    ("device", lambda r: r["device"]["name"], "on {}"),
    ("CPU kernels", lambda r: r["device"]["cpu_capability"], "on a CPU with {} kernels"),
    ("kernel variables", lambda r: r["device"]["kernel_environment"], "with {} set"),
    ("engine", lambda r: r["engine"]["used"], "with --engine {}"),
    ("memory format", lambda r: r["determinism"]["memory_format"], "with --memory-format {}"),
    ("deterministic", lambda r: r["determinism"]["deterministic"], "with --deterministic {}"),
    # the libraries whose kernels compute it: a resume after an upgrade mixes two sets of them
    ("torch", lambda r: r["versions"]["torch"], "with torch {}"),
    ("CUDA", lambda r: r["versions"]["cuda"], "with CUDA {}"),
    ("cuDNN", lambda r: r["versions"]["cudnn"], "with cuDNN {}"),
)


def _text(value: object) -> str:
    if isinstance(value, dict):
        return " ".join(f"{k}={v}" for k, v in value.items()) or "none"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def changed_arithmetic(attempts: list[dict], now: dict) -> str:
    """What this attempt (record ``now``) computes with that differs from the earlier
    ``attempts`` that trained the rounds it keeps, and how to get an uninterrupted run's numbers;
    "" when nothing differs. A value an older record lacks is not compared."""

    def read(record: dict, get: Callable[[dict], object]) -> object:
        try:
            return get(record)
        except (KeyError, TypeError):
            return None

    differences, restore, first = [], [], 1
    for attempt in attempts:
        last = attempt["rounds_through"]
        rounds = f"round {last}" if first == last else f"rounds {first}-{last}"
        first = last + 1
        for what, get, how in ARITHMETIC:
            was, is_now = read(attempt, get), read(now, get)
            if was is not None and is_now is not None and was != is_now:
                differences.append(f"{what} {_text(is_now)} now, {_text(was)} for {rounds}")
                restore.append(how.format(_text(was)))
    if not differences:
        return ""
    return (
        f"with other arithmetic than its earlier rounds had ({'; '.join(differences)}): its "
        "numbers will differ from an uninterrupted run's; run.json records both (device, "
        "engine, determinism and versions now, earlier_attempts before). For an uninterrupted "
        "run's numbers, stop this attempt and run the same command "
        f"{' and '.join(dict.fromkeys(restore))}; or train the run from round 0 in another "
        "directory"
    )
