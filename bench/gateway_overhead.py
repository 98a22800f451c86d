"""What the gateway costs a request: auth (JWT) + a per-client rate limit + JSON per-inference logs,
all on, against all three off, at 32 clients on the ``tiny`` model over HTTP.

    .venv/bin/python -m bench.gateway_overhead                    # 3 rounds of 10 s points
    .venv/bin/python -m bench.gateway_overhead --seconds 5 --rounds 5
    .venv/bin/python -m bench.gateway_overhead --write            # also write bench/results/<date>-gateway.md

Two servers per round from this checkout, each started fresh, warmed for 2 s, then measured with
``wrk`` (HTTP JSON): ``off`` (no gateway flag, text logs) and ``on`` (``--auth jwt`` with a JWKS made
here and every request carrying a valid RS256 token, ``--client-rate-limit`` and ``--client-burst``
high enough never to refuse, so each request still takes from its client's bucket, and
``--log-format json`` with ``--log-inferences true``, one JSON record per inference, when this
checkout's ``conch serve`` has that flag). The target (issue 17) is a cost under 10%.

The rounds alternate the order. The figure is the median of the per-round ratios ``on / off`` with
the lowest and highest in brackets, as in ``bench.run``: on a shared 2-core machine one point can be
20-30% off, so it is indicative. The server's CPU per request is given too (its process's CPU time
over the requests wrk counted), which the machine's other load sways less.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

from bench.loadgen import LoadResult, infer_body, run_wrk
from bench.models import write_conch_repository
from bench.servers import Ports, ServerProcess, cpu_reading

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ("off", "on")
MODEL = "tiny"
ISSUER, AUDIENCE = "https://bench.invalid", "conch-bench"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.gateway_overhead", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="each measured point (default 10)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the two servers (default 3)")
    parser.add_argument("--clients", type=int, default=32, help="concurrent connections (default 32)")
    parser.add_argument("--write", action="store_true", help="write the report under bench/results/")
    parser.add_argument(
        "--parts",
        action="store_true",
        help="also measure each part alone (auth, rate, logs), to see which one costs",
    )
    return parser.parse_args(argv)


def signing_material(work: Path) -> tuple[Path, str]:
    """A JWKS file with a fresh RSA key's public half, and an hour's ``infer`` token it signed."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwks = work / "jwks.json"
    jwks.write_text(json.dumps({"keys": [{**public, "kid": "bench", "alg": "RS256", "use": "sig"}]}))
    claims = {
        "sub": "bench",
        "iss": ISSUER,
        "aud": AUDIENCE,
        "exp": int(time.time()) + 3600,
        "scope": "infer",
    }
    return jwks, jwt.encode(claims, key, algorithm="RS256", headers={"kid": "bench"})


def has_inference_logs() -> bool:
    """Whether this checkout's ``conch serve`` has ``--log-inferences`` (issue 17's JSON records)."""
    listing = subprocess.run(
        [sys.executable, "-m", "conch.cli.main", "serve", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return "--log-inferences" in listing


def part_flags(jwks: Path, inference_logs: bool) -> dict[str, list[str]]:
    """Each part's flags: ``auth``, ``rate`` and ``logs``; ``on`` is all three."""
    parts = {
        "auth": [
            "--auth",
            "jwt",
            "--jwt-jwks",
            str(jwks),
            "--jwt-issuer",
            ISSUER,
            "--jwt-audience",
            AUDIENCE,
        ],
        "rate": ["--client-rate-limit", "1000000", "--client-burst", "1000000"],
        "logs": ["--log-format", "json", *(["--log-inferences", "true"] if inference_logs else [])],
    }
    return {**parts, "on": [flag for flags in parts.values() for flag in flags]}


def server_for(config: str, repository: Path, flags: dict[str, list[str]], logs: Path) -> ServerProcess:
    ports = Ports()
    command = [sys.executable, "-m", "conch.cli.main", "serve", str(repository), "--host", "127.0.0.1"]
    command += ["--http-port", str(ports.http), "--grpc-port", str(ports.grpc)]
    command += ["--metrics-port", str(ports.metrics)]
    command += flags.get(config, [])
    if "--log-format" not in command:
        command += ["--log-format", "text"]
    return ServerProcess(config, command, ports, logs / f"{config}.log", cwd=ROOT)


def measure(
    server: ServerProcess, clients: int, seconds: float, work: Path, headers: dict[str, str]
) -> tuple[LoadResult, float | None]:
    """A 2 s warm-up, then the point, with the server process's CPU microseconds per request."""
    body = work / "body.json"
    body.write_bytes(infer_body(MODEL))
    url = f"{server.ports.http_url}/v2/models/{MODEL}/infer"
    run_wrk(url, body, clients, 2, work, headers)
    before = cpu_reading(server)
    result = run_wrk(url, body, clients, seconds, work, headers)
    after = cpu_reading(server)
    requests = result.throughput * max(1, round(seconds))
    if before is None or after is None or not result.ok or requests <= 0:
        return result, None
    return result, (after[0] - before[0]) / requests * 1e6


def ratio_cell(ratios: list[float]) -> str:
    if not ratios:
        return "n/a"
    return f"{statistics.median(ratios):.3f}x [{min(ratios):.3f}-{max(ratios):.3f}]"


def commit() -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "conch"], cwd=ROOT, capture_output=True, text=True
    )
    return head.stdout.strip() + (" (conch/ had uncommitted changes)" if dirty.stdout.strip() else "")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    lines: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    with tempfile.TemporaryDirectory(prefix="conch-gateway-bench-") as folder:
        work = Path(folder)
        jwks, token = signing_material(work)
        inference_logs = has_inference_logs()
        flags = part_flags(jwks, inference_logs)
        configs = [*CONFIGS, "auth", "rate", "logs"] if args.parts else list(CONFIGS)
        repository = write_conch_repository(work / "models", [MODEL])
        results: dict[str, list[tuple[LoadResult, float | None]]] = {c: [] for c in configs}
        for number in range(args.rounds):
            order = configs if number % 2 == 0 else list(reversed(configs))
            for config in order:
                headers = {"Authorization": f"Bearer {token}"} if config in ("on", "auth") else {}
                with server_for(config, repository, flags, work / "logs") as server:
                    result, cpu = measure(server, args.clients, args.seconds, work, headers)
                results[config].append((result, cpu))
                say(
                    f"round {number + 1} {config:4} {result.throughput:9.1f}/s p50 {result.p50_ms:6.2f} ms "
                    f"p99 {result.p99_ms:6.2f} ms server CPU {cpu or 0:6.1f} us/request "
                    f"{result.failure or ''}"
                )
    logs = "--log-format json --log-inferences true" if inference_logs else "--log-format json only"
    say("")
    say(
        f"conch {commit()}; tiny over HTTP JSON (wrk), {args.clients} clients, {args.seconds:.0f} s points, "
        f"{args.rounds} rounds; on = --auth jwt (RS256) + --client-rate-limit 1e6 + {logs}"
    )
    say("")
    say("| servers | requests/s | cost | server CPU us/request | cost |")
    say("|---|---|---|---|---|")
    for config in configs[1:]:
        pairs = [
            (off, on)
            for off, on in zip(results["off"], results[config], strict=True)
            if off[0].ok and on[0].ok
        ]
        throughput = [on[0].throughput / off[0].throughput for off, on in pairs]
        cpu_ratios = [on[1] / off[1] for off, on in pairs if on[1] and off[1]]
        if not throughput:
            say(f"| {config} / off | n/a | | n/a | |")
            continue
        cpu_cells = (
            f"{ratio_cell(cpu_ratios)} | {statistics.median(cpu_ratios) - 1:+.1%}" if cpu_ratios else "n/a |"
        )
        say(
            f"| {config} / off | {ratio_cell(throughput)} | {1 - statistics.median(throughput):+.1%} | "
            f"{cpu_cells} |"
        )
    if args.write:
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d-%H%M%S")
        out = ROOT / "bench" / "results" / f"{stamp}-gateway.md"
        header = "# bench.gateway_overhead\n\nIndicative: a shared 2-core machine.\n\n```\n"
        rows = [line for line in lines if line.startswith("|")]
        body = "\n".join(line for line in lines if not line.startswith("|"))
        out.write_text(header + body.strip() + "\n```\n\n" + "\n".join(rows) + "\n")
        print(f"\nwritten to {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
