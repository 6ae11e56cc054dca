"""The one exception type that reaches the user as a single line."""


class UserError(Exception):
    """A problem with the user's input (config, data, budget, bundle).

    Entry points catch it, print ``error: <message>`` on one line and exit with code 2,
    before anything is written. Raise it with a message that names the offending key or
    file and, where there is a fixed set, the allowed values.
    """


class Interrupted(Exception):
    """Ctrl-C during a run: entry points print the message (where the run stopped, how to resume)
    and exit with code 130."""
