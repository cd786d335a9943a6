"""Standard output read by a reader that may leave early (`demo | head`, `simulate | head -3`).

Python turns the reader's exit into `BrokenPipeError` on the next write, and again when it
flushes stdout at exit ("Exception ignored ..."). `reader_gone` ends the command quietly instead:
stdout goes to /dev/null (so the exit flush has nowhere to fail) and the exit code is 141,
128 + SIGPIPE, what a shell reports for a command that a pipe's reader left (`yes | head`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = ["SIGPIPE_EXIT", "Output", "reader_gone"]

SIGPIPE_EXIT = 141


@dataclass(slots=True)
class Output:
    """The exit code the command should return: 0, or `SIGPIPE_EXIT` once the reader left."""

    exit_code: int = 0


@contextmanager
def reader_gone() -> Iterator[Output]:
    """Run the block that writes to stdout; a `BrokenPipeError` ends it quietly."""
    output = Output()
    try:
        yield output
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        output.exit_code = SIGPIPE_EXIT
