"""Versioned model packages: ``metadata.json``, ``conch package`` and ``conch install``."""
