"""The ``conch`` command line: thin over library calls."""
