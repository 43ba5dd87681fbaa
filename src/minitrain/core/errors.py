"""One exception type for everything a user can get wrong, and the CLI's exit codes.

The CLI turns a `UserError` into a single line on stderr and exit code 2, never a traceback.
"""

EXIT_USER_ERROR = 2  # bad input, a refused command, a full disk: one line on stderr, nothing overwritten
EXIT_NON_FINITE = 3  # a run stopped on a non-finite value: its rows, results and dashboard are kept


class UserError(Exception):
    """Bad input: the message names the problem and the fix, on one line."""

    exit_code = EXIT_USER_ERROR


class Interrupted(KeyboardInterrupt):
    """Ctrl-C at a point where the CLI's usual advice (resume the run with --resume) is wrong: `hint` says
    what to run instead (e.g. the page of a run that has finished)."""

    def __init__(self, hint: str):
        super().__init__(hint)
        self.hint = hint
