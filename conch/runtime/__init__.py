"""How ``conch serve`` runs: its settings (:mod:`.settings`), and the processes of ``--proxies N``:
proxy processes that own the public ports and one model process that owns the scheduler and the
models (``docs/architecture.md``)."""
