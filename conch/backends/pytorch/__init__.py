"""The PyTorch backend: Triton's ``platform: "pytorch_libtorch"`` / ``backend: "pytorch"``.

``program.py`` reads TorchScript (``model.pt``) and ``torch.export`` (``model.pt2``) programs, the
only place that imports torch; ``naming.py`` binds config tensors to the program's positions as
Triton does; ``binding.py`` completes and checks the config against the program; ``options.py``
reads the model's ``parameters`` (precision, memory format, GPU memory cap); ``instance.py`` runs one
instance on the CPU or a GPU; ``gpu.py`` checks GPUs and caps their memory; ``cold_start.py`` gives
GPU instances warm-up samples. The loader's builder is :mod:`conch.lifecycle.builders.pytorch_models`.
"""
