"""What runs inside a Python model's process. These modules import only the standard library and
numpy (and each other by their top-level names), since the process may use another environment."""
