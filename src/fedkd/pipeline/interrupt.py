"""Ctrl-C stops the workflow even where Snakemake would lose it.

Snakemake stops on Ctrl-C by catching KeyboardInterrupt around its scheduling loop, but its
console handler swallows a KeyboardInterrupt raised while it writes a line (``except
(KeyboardInterrupt, SystemExit): pass`` in its stream handler's ``emit``): the interrupt is then
lost, the running job ends (it got the signal too) and, with ``keep-going``, Snakemake starts the
next ones. The handler installed here also sets the flag its SIGTERM handler sets
(``_user_kill``), which the scheduling loop reads at every step, so a lost KeyboardInterrupt
still stops the workflow once the running jobs have ended.
"""

from __future__ import annotations

import signal


def stop_on_interrupt(scheduler: object) -> bool:
    """Install the SIGINT handler for ``scheduler`` (Snakemake's JobScheduler); whether it was
    installed. Left alone: a scheduler without the flag (another Snakemake), a SIGINT handler
    someone else installed, or a thread that may not install handlers."""
    if not hasattr(scheduler, "_user_kill"):
        return False
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return False

    def interrupt(signum, frame):
        # a plain assignment: the handler may run while the scheduler holds its own lock
        if scheduler._user_kill is None:
            scheduler._user_kill = "graceful"
        raise KeyboardInterrupt

    try:
        signal.signal(signal.SIGINT, interrupt)
    except ValueError:  # not the main thread
        return False
    return True
