"""Fixtures that start real ``conch serve`` processes for the integration suite."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.server_process import ServerProcess

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "model_repository"


@pytest.fixture(scope="module")
def start_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., ServerProcess]]:
    """Call with a repository path (None: the embedded default) and extra CLI args; stopped at module end."""
    started: list[ServerProcess] = []
    log_dir = tmp_path_factory.mktemp("logs")

    def start(repository: Path | None, *args: str, env: dict[str, str] | None = None) -> ServerProcess:
        server = ServerProcess(repository, list(args), env or {}).start(log_dir)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="module")
def example_server(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    """The embedded default repository, served with no repository argument."""
    return start_server(None)
