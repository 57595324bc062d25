"""The command line's error for bad usage or bad input, shared by ``hqflow.cli`` and ``hqflow.cli_train``
(which import it from here, not from each other)."""


class UsageError(Exception):
    """Bad usage or bad input: reported on one line, exit status 2."""
