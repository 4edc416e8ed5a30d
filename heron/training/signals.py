"""Ctrl-C and SIGTERM for long commands: the first signal asks the loop to stop where it can
(after its current step, saving what it would lose); a second one stops at once."""

from __future__ import annotations

import signal
import threading


class RunInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM stopped a command, after it saved what it would otherwise lose."""

    def __init__(self, message: str, signal_number: int):
        super().__init__(message)
        self.signal_number = signal_number


class StopRequests:
    """Within ``with StopRequests() as stop:`` SIGINT and SIGTERM set ``stop.signal_number``
    (the loop checks it between steps); a second signal raises KeyboardInterrupt. Off the
    main thread (where Python delivers no signals) it does nothing."""

    def __init__(self):
        self.signal_number: int | None = None
        self._previous: dict = {}

    @property
    def name(self) -> str:
        return signal.Signals(self.signal_number).name if self.signal_number else ""

    def _request(self, number, frame):
        if self.signal_number is not None:
            raise KeyboardInterrupt
        self.signal_number = number

    def __enter__(self) -> StopRequests:
        if threading.current_thread() is threading.main_thread():
            self._previous = {
                n: signal.signal(n, self._request) for n in (signal.SIGINT, signal.SIGTERM)
            }
        return self

    def stopped(self, step: int, checkpoint: int | None, run_dir: str) -> RunInterrupted:
        """The interruption of a training loop at ``step``, after it saved ``checkpoint``
        (None: the run saves no checkpoints)."""
        if checkpoint is None:
            message = f"{self.name} at step {step}; the run saves no checkpoints (--no-checkpoints)"
        else:
            message = (
                f"{self.name} at step {step}: checkpoint {checkpoint} saved; continue with "
                f"`heron train --resume {run_dir}`"
            )
        return RunInterrupted(message, self.signal_number)

    def __exit__(self, *exc) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous = {}
