"""The workflow's Ctrl-C handler (fedkd.pipeline.interrupt): a KeyboardInterrupt as before, and
the scheduler's stop flag set, so that an interrupt Snakemake's console swallows still stops it."""

from __future__ import annotations

import inspect
import signal

import pytest

from fedkd.pipeline.interrupt import stop_on_interrupt


class FakeScheduler:
    _user_kill = None


@pytest.fixture
def default_sigint():
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, signal.default_int_handler)


def test_ctrl_c_raises_keyboard_interrupt_and_asks_the_scheduler_to_stop(default_sigint):
    scheduler = FakeScheduler()
    assert stop_on_interrupt(scheduler)
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)
    assert scheduler._user_kill == "graceful"


def test_a_forceful_stop_already_asked_for_is_kept(default_sigint):
    scheduler = FakeScheduler()
    scheduler._user_kill = "forceful"
    stop_on_interrupt(scheduler)
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)
    assert scheduler._user_kill == "forceful"


def test_another_handler_or_another_scheduler_is_left_alone(default_sigint):
    assert not stop_on_interrupt(object())  # no stop flag: not Snakemake's scheduler
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

    def mine(signum, frame):
        pass

    signal.signal(signal.SIGINT, mine)
    assert not stop_on_interrupt(FakeScheduler())
    assert signal.getsignal(signal.SIGINT) is mine


def test_snakemakes_scheduling_loop_reads_the_flag_the_handler_sets():
    # if a Snakemake release renames the flag, the handler would set a flag nobody reads
    from snakemake.scheduling.job_scheduler import JobScheduler

    assert "user_kill = self._user_kill" in inspect.getsource(JobScheduler.schedule)
    assert 'self._user_kill = "graceful"' in inspect.getsource(JobScheduler.exit_gracefully)
