"""The router picks the version of a model that answers a request; it owns the breakers and the fallbacks.

The lifecycle decides which versions exist; the router decides, request by request, which of them
serves: the newest one, unless its circuit is open and the fallback strategy names another.
"""
