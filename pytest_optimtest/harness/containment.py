"""A case that hangs or kills its process is one failed item, not a lost session.

- `deadline(seconds)`: SIGALRM raises `CaseTimedOut` in the main thread where the case hangs, so
  the failure's traceback is the stack where it hung; the user's own alarm (pytest-timeout's
  signal method) is restored afterwards with the time it had left.
- `Journal`: before a case runs, a file names what it is doing (check, step); it is removed when
  the run returns or raises. A file left behind means the process running that case died; the
  next item of the case (under pytest-xdist, in the worker that replaced the dead one) fails at
  once as "crashed", instead of running the case again and dying again.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

JOURNAL_ENV = "PYTEST_OPTIMTEST_JOURNAL"  # the folder, shared by the controller and its xdist workers


class CaseTimedOut(BaseException):
    """The case ran past its timeout. A BaseException, so that no `except Exception` on the way
    (the optimizer's, dynamo's fallback, a retry) swallows it and waits again."""

    def __init__(self, message: str, seconds: float) -> None:
        super().__init__(message)
        self.seconds = seconds  # the deadline that fired: a nested one tells its own from an outer one


class Progress:
    """What the running case is doing, for the timeout's and the crash's messages."""

    def __init__(self) -> None:
        self.what = ""
        self.step = 0
        self.journal: Path | None = None

    def at_step(self, step: int) -> None:
        self.step = step
        if self.journal is not None:
            with contextlib.suppress(OSError):
                self.journal.write_text(self.describe())

    def describe(self) -> str:
        return f"{self.what}, step {self.step}" if self.step else self.what


PROGRESS = Progress()  # one case runs at a time in a process


@contextlib.contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Raise CaseTimedOut in the block after `seconds` (no-op without SIGALRM or off the main thread). Where an
    outer alarm (the case's own deadline, the user's) fires first, it stays: a nested deadline never extends it."""
    if not seconds or not hasattr(signal, "SIGALRM") or threading.current_thread() is not threading.main_thread():
        yield
        return
    outer_delay, _ = signal.getitimer(signal.ITIMER_REAL)
    if outer_delay and outer_delay <= seconds:
        yield
        return

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        raise CaseTimedOut(f"timed out after {seconds:g}s in {PROGRESS.describe() or 'the case'}; the traceback below "
                           "is where it hung (timeout_s in the spec, or --optim-timeout)", seconds)

    previous = signal.signal(signal.SIGALRM, on_alarm)
    user_delay, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    start = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if user_delay:  # the user's own alarm keeps the time it had left
            signal.setitimer(signal.ITIMER_REAL, max(user_delay - (time.monotonic() - start), 1e-3))


class Journal:
    """Files naming the cases being run in a folder that outlives a dead worker."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _file(self, key: tuple[str, str]) -> Path:
        return self.folder / hashlib.sha1("\0".join(key).encode()).hexdigest()

    def died_in(self, key: tuple[str, str]) -> str | None:
        """What a dead process was doing with this case, or None."""
        with contextlib.suppress(OSError):
            return self._file(key).read_text()
        return None

    @contextlib.contextmanager
    def running(self, key: tuple[str, str], what: str) -> Iterator[None]:
        path = self._file(key)
        PROGRESS.what, PROGRESS.step, PROGRESS.journal = what, 0, path
        with contextlib.suppress(OSError):
            path.write_text(what)
        try:
            yield
        finally:
            PROGRESS.journal = None
            with contextlib.suppress(OSError):
                path.unlink()


def journal_folder() -> Path | None:
    folder = os.environ.get(JOURNAL_ENV)
    return Path(folder) if folder else None
