"""The model repository: finding models, parsing and completing their configs, loading versions."""
