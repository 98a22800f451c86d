"""KServe V2 REST over a raw ASGI app: JSON via orjson and Triton's binary tensor extension."""
