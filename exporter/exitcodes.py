"""The exit codes of every command, in one table (docs/exit-codes.md is the same table; a test keeps them equal).

Imported by the command line at start: nothing here imports anything heavy.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """What a command's exit status means. Each command uses the subset docs/exit-codes.md lists for it."""

    OK = 0
    PROBLEMS = 1  # check: problems found; parse: not a capture; baseline show: no baseline yet; kmsg-relay: failed
    USAGE = 2  # bad flags, config or input file; check: could not check; a file that cannot be read or written
    INTERNAL = 70  # a bug (EX_SOFTWARE): one line on stderr, the traceback in the log
    INTERRUPTED = 130  # Ctrl-C (SIGINT) of a command that is not serve: 128 + 2, as a shell reports it


# One line each, as docs/exit-codes.md words them.
MEANINGS = {
    ExitCode.OK: "success (for `check`: no problem found)",
    ExitCode.PROBLEMS: "the command ran and the answer is no: `check` found problems, `parse` was not given a capture, "
    "`baseline show` has no baseline yet, `kmsg-relay` could not relay",
    ExitCode.USAGE: "usage: a bad flag, configuration or web config, an input that cannot be read, an output that "
    "cannot be written, `check` could not check, `serve` cannot listen",
    ExitCode.INTERNAL: "internal error (a bug): one line on stderr, the traceback in the log (`internal_error`)",
    ExitCode.INTERRUPTED: "interrupted by Ctrl-C (SIGINT); `serve` stops cleanly on SIGINT and SIGTERM and exits 0",
}
