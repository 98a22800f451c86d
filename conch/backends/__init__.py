"""Backends compute: each turns named numpy inputs into named numpy outputs for one model instance."""
