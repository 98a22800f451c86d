"""Streaming inference: records read from a broker's stream, answered into a results stream.

Another way in beside ``frontends/``: each input entry becomes an ordinary
:class:`conch.core.types.InferenceRequest` and runs through :meth:`conch.server.InferenceServer.infer`,
so records share the model's dynamic batcher, statistics, releases, fallbacks and input checks with
HTTP and gRPC requests.

- ``config.py``: ``streams.yaml`` (``conch serve --streams``), its defaults and the broker credentials;
- ``record.py``: an input entry to a request, a response to a result entry, a refusal to a dead letter;
- ``broker.py``: the source and sink boundary a broker adapter fills (``redis_broker.py`` for Redis
  Streams; a Kafka adapter would be another module of the same shape);
- ``consumer.py``: the loop that reads, infers, writes, and acknowledges only what was written;
  ``window.py``: how many of its records may be inside the model at once;
- ``state.py`` and ``metrics.py``: each stream's figures, for Prometheus and the status page;
- ``service.py``: the consumers of one server process, started and stopped with it.

See docs/streams.md.
"""
