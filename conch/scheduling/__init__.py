"""Scheduling decides when a request runs and on which model instance (and, later, with whom)."""
