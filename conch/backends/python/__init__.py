"""Triton's Python backend: ``model.py`` files with ``TritonPythonModel`` run unmodified, each model
instance in a process of its own, tensors crossing in shared memory, restarted when it dies."""
