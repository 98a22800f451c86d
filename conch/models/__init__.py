"""What is served now: each model, its versions and a request's route to one (:mod:`.model`), the
table of them (:class:`~.served_models.ServedModels`), and the circuit breaker and fallback policy
each version carries. The lifecycle writes this room, the router and the frontends read it;
``repository/`` only reads model folders."""
