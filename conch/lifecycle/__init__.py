"""Changing what is served: loading model folders, hot swaps, draining, and the deep health check.

The repository (:mod:`conch.repository`) says what is served now; this package decides when that
changes, and builds what replaces it aside, so requests never see a half-loaded model.
"""
