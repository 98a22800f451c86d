"""Releases: a new model version takes traffic in steps, judged by a quality gate, then promoted or undone.

A release is declared in ``<model>/release.yaml`` (or sent as a JSON body): :mod:`.spec` reads and checks
it. :mod:`.state` is the release's state machine, decided with ``now`` passed in, and :mod:`.store` keeps
it in the state dir so a restart resumes a release instead of starting it over. This package decides the
weights and when to move on; the router applies the weights to requests, and nothing here touches a
request.
"""
