"""An atheris (libFuzzer) harness for the readers of what an HTTP client sends: the V2 infer body
with the binary extension, ``Inference-Header-Content-Length``, a ``Content-Encoding`` body, the JSON
depth walk and the load API's config override. Coverage-guided, unlike the hypothesis tests in
``tests/unit/*/test_fuzz_*.py``, which run bounded in CI; this one runs by hand, as long as wanted.

atheris is not a conch dependency: install it into a throwaway virtual environment and put that on
the path of the project's interpreter (see ``bench/fuzz/README.md``)::

    python3.11 -m venv ~/.cache/conch-atheris && ~/.cache/conch-atheris/bin/pip install atheris
    PYTHONPATH=$HOME/.cache/conch-atheris/lib/python3.11/site-packages \\
        .venv/bin/python -m bench.fuzz.http_decoders -max_total_time=300 bench/fuzz/corpus

The property is the hypothesis tests' one: an input decodes or raises conch's own error with a 4xx
status; any other exception is a crash, which libFuzzer saves as ``crash-<sha1>`` to replay with
``.venv/bin/python -m bench.fuzz.http_decoders crash-<sha1>``.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import atheris

with atheris.instrument_imports(enable_loader_override=False):
    from conch.core.errors import ConchError
    from conch.frontends.http.body import read_body
    from conch.frontends.http.infer_codec import decode_request, header_length, load_json_object
    from conch.lifecycle.load_request import config_override


def _body(data: bytes, encoding: bytes) -> bytes:
    messages = [{"body": data, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return messages.pop(0)

    return asyncio.run(read_body({"headers": [(b"content-encoding", encoding)]}, receive, 1 << 16))


def one_input(data: bytes) -> None:
    """Byte 0 chooses the reader, byte 1 the header's length (up to 12), then the header and the body."""
    if len(data) < 2:
        return
    choice, size = data[0] % 5, data[1] % 13
    header, body = data[2 : 2 + size], data[2 + size :]
    try:
        if choice == 0:
            decode_request(body, None, "model", "1")
        elif choice == 1:
            decode_request(body, header_length(header) if header else len(body) // 2, "model", "1")
        elif choice == 2:
            _body(body, header or b"gzip")
        elif choice == 3:
            load_json_object(body, 8, skip_tensor_data=True)
        else:
            config_override(load_json_object(body))
    except ConchError as exc:
        if not 400 <= exc.kind.http_status < 500:
            raise AssertionError(f"a {exc.kind.http_status} for client input: {exc.message}") from None


def main() -> None:
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
