"""The errors a user can cause. The CLI turns each into one line on stderr and an exit code."""

from __future__ import annotations


class AttnvizError(Exception):
    """Something the user asked for cannot be done (exit status 1)."""

    exit_code = 1


class UsageError(AttnvizError):
    """The command line or the options are wrong (exit status 2)."""

    exit_code = 2
