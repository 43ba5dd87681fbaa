"""One exception type for everything a user can get wrong.

The CLI turns a `UserError` into a single line on stderr and exit code 2, never a traceback.
"""


class UserError(Exception):
    """Bad input: the message names the problem and the fix, on one line."""

    exit_code = 2
