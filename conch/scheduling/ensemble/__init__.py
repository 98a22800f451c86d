"""Triton's ensembles (``platform: "ensemble"``): a model whose steps are requests to other models.

- :mod:`.plan`: the steps as a data-flow graph, checked from the ensemble's config alone;
- :mod:`.step_checks`: the ensemble checked against its step models' configs;
- :mod:`.scheduler`: runs the steps of a request through the server's own request path.

The loader's builder that puts them together is :mod:`conch.lifecycle.builders.ensembles` (see
``docs/ensembles.md``).
"""
