"""What an export reports when it cannot finish, or finishes having changed something it should say."""

from __future__ import annotations


class ExportError(Exception):
    """The model cannot be exported as asked; the message says what is wrong and what to do.

    Nothing has been written to the repository when this is raised.
    """


class ConfigRewrittenWarning(UserWarning):
    """The model folder's ``config.pbtxt`` no longer described the exported graph and was rewritten.

    A warning, not an error: the new version is served correctly, but an operator's tuning of the old
    config (instances, batching delays) is gone and the older versions may no longer fit the config.
    """
