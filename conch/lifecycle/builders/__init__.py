"""One builder per backend: each turns a version's folder and config into instances and a scheduler.

- :mod:`.onnx_models`: ONNX Runtime sessions (the loader's own backend);
- :mod:`.python_models`: Triton Python-backend models, each instance a process of its own;
- :mod:`.pytorch_models`: TorchScript and ``torch.export`` programs;
- :mod:`.ensembles`: ensembles, whose steps go through the server's own request path.

Those that call back into the server are registered once it exists
(:mod:`conch.runtime.server_builders`).
"""
