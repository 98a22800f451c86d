"""The status page at ``/ui``: what this server serves and how it is doing, for people.

``page.py`` answers ``/`` and ``/ui`` with the page, its style sheet and its script (``index.html``,
``status.css``, ``status.js``, shipped as package data), and ``/ui/status.json``, which
``summary.py`` builds from the repository index, the releases, the recent traffic
(:mod:`conch.observability.recent_traffic`, fed by ``sampling.py``), the circuit breakers, the
fallbacks and the recent events. The page holds no data: its script reads the JSON, with a bearer
token when the gateway asks for one. See docs/status-page.md.
"""
