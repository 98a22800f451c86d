"""The ``CONCH_*`` variable of each ``conch serve`` flag: one rule for the flags' defaults, the
help texts and the messages that name a flag (it imports nothing, so parsing stays light)."""


def variable_of(flag: str) -> str:
    """The variable that sets ``flag``'s default (``--grpc-port``: ``CONCH_GRPC_PORT``)."""
    return "CONCH_" + flag.lstrip("-").replace("-", "_").upper()
