"""The status page at ``/ui`` in a real browser: Debian's Chromium, headless, driven by Playwright.

A live ``conch serve`` gets traffic (answered and refused requests), a release in progress and an
unload; the page must show the models and their states, a recent request rate, an error rate, the
release's weights and the unload event, load nothing from anywhere else, and fit a phone's width.
With ``--auth jwt`` the page arrives without data, asks for a token, and shows the data once a token
with the ``infer`` scope is given. Screenshots land in ``tests/artifacts/`` (git-ignored); the
desktop one is copied to ``docs/images/status-page.png`` with ``UPDATE_DOCS_IMAGES=1``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jwt
import numpy as np
import pytest
import tritonclient.http as httpclient
from cryptography.hazmat.primitives.asymmetric import rsa
from onnx import TensorProto
from playwright.sync_api import Browser, Page, expect, sync_playwright
from tritonclient.utils import InferenceServerException

from tests.fixtures.onnx_models import identity_model, reshape_model, scale_model, write_repository
from tests.integration.server_process import ServerProcess

pytestmark = pytest.mark.chromium  # the program this file drives

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "artifacts"
DOCS_IMAGE = ROOT / "docs" / "images" / "status-page.png"
CONFIG = 'name: "scored"\nmax_batch_size: 8\nversion_policy: { latest: { num_versions: 1 } }\n'
RELEASE = {"candidate": 2, "baseline": 1, "steps": [{"weight": 25, "duration": "1h"}, {"weight": 100}]}
#: A breaker that opens after 4 failed calls of 4 and stays open for the test's length, and a business
#: default that answers while it is open.
FLAKY = """name: "flaky"
parameters { key: "circuit_breaker.minimum_calls" value { string_value: "4" } }
parameters { key: "circuit_breaker.window_calls" value { string_value: "4" } }
parameters { key: "circuit_breaker.open_seconds" value { string_value: "600" } }
parameters { key: "FALLBACK_STRATEGY" value { string_value: "BUSINESS" } }
parameters { key: "FALLBACK_BUSINESS_DEFAULT" value { string_value: "{\\"Y\\": [[0, 0], [0, 0]]}" } }
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2, 2 ] } ]
"""
#: Asks the reshape model for [3, 3] of its 4 values: the model fails (a server error).
FAILING_RESHAPE = (
    b'{"inputs":[{"name":"X","shape":[4],"datatype":"FP32","data":[0,1,2,3]},'
    b'{"name":"SHAPE","shape":[2],"datatype":"INT64","data":[3,3]}]}'
)
#: A model folder whose name is markup: the page must show it as text, never run it.
HOSTILE = "<img src=x onerror=alert(1)>"
WAIT_MS = 30_000  # the page refreshes every 3 s; the machine may be loaded

ISSUER, AUDIENCE = "https://issuer.test", "conch"
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def repository(root: Path) -> Path:
    identity = identity_model(TensorProto.FLOAT)
    models = {
        "scored": (scale_model(1.0), CONFIG),
        "doomed": (identity, None),
        "flaky": (reshape_model(), FLAKY),
        HOSTILE: (identity, None),
    }
    write_repository(root, models)
    (root / "scored" / "2").mkdir()
    (root / "scored" / "2" / "model.onnx").write_bytes(scale_model(2.0).SerializeToString())
    return root


def token(scope: str) -> str:
    claims = {"sub": "ops", "iss": ISSUER, "aud": AUDIENCE, "exp": int(time.time()) + 600, "scope": scope}
    return jwt.encode(claims, KEY, algorithm="RS256", headers={"kid": "k1"})


def infer(
    server: ServerProcess, rows: int = 1, width: int = 4, headers: dict[str, str] | None = None
) -> None:
    with httpclient.InferenceServerClient(server.http_url) as client:
        tensor = httpclient.InferInput("INPUT0", [rows, width], "FP32")
        tensor.set_data_from_numpy(np.ones((rows, width), np.float32))
        client.infer("scored", [tensor], headers=headers)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def busy_server(
    start_server: Callable[..., ServerProcess], tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    """A server with answered and refused requests, a release at its first step, an open circuit and
    one unload."""
    root = tmp_path_factory.mktemp("status")
    server = start_server(
        repository(root / "models"),
        "--model-control-mode", "explicit",
        "--load-model", "*",
        "--state-dir", str(root / "state"),
        "--circuit-breaker", "true",
    )  # fmt: skip
    started = server.request("POST", "/v2/models/scored/release", json.dumps(RELEASE).encode())
    assert started.status == 200, started.body
    for _ in range(40):
        infer(server)
    for _ in range(6):  # a wrong width: 400, counted as a failed request
        with pytest.raises(InferenceServerException):
            infer(server, width=3)
    failed = [server.request("POST", "/v2/models/flaky/infer", FAILING_RESHAPE).status for _ in range(4)]
    assert failed == [500] * 4  # the breaker opens on the fourth
    answered = server.request("POST", "/v2/models/flaky/infer", FAILING_RESHAPE)
    assert (answered.status, answered.headers.get("conch-fallback")) == (200, "BUSINESS")
    unloaded = server.request("POST", "/v2/repository/models/doomed/unload")
    assert unloaded.status == 200, unloaded.body
    return server


def open_page(browser: Browser, url: str, **context: Any) -> tuple[Page, list[str]]:
    """A fresh tab on ``url``, and the list of every URL it requests (filled as it loads)."""
    page = browser.new_context(**context).new_page()
    # An alert() from injected markup would be recorded here before any dialog could show.
    page.add_init_script(
        "window.alert = (text) => { window.__dialogs = [...(window.__dialogs || []), text]; };"
    )
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.goto(url)
    return page, requested


def test_the_page_shows_models_traffic_release_and_events(
    busy_server: ServerProcess, browser: Browser
) -> None:
    origin = f"http://{busy_server.http_url}"
    page, requested = open_page(browser, f"{origin}/", viewport={"width": 1280, "height": 900})
    scored = page.locator('#models tr[data-model="scored"]')
    expect(scored).to_be_visible(timeout=WAIT_MS)

    assert page.url == f"{origin}/ui"  # / redirects to the page
    expect(page.locator("#server")).to_contain_text("ready")
    expect(scored.locator('td[data-label="Versions"]')).to_contain_text("v1 READY")
    expect(scored.locator('td[data-label="Versions"]')).to_contain_text("v2 READY")
    rate = float(scored.locator('td[data-label="Requests/s"]').inner_text())
    assert rate > 0, "requests sent in the last minutes must show as a rate"
    errors = scored.locator('td[data-label="Errors"]').inner_text()
    assert re.fullmatch(r"[\d.]+% \(6\)", errors), errors  # the six refused requests
    assert float(errors.split("%")[0]) > 0
    assert scored.locator('td[data-label="P50"]').inner_text().endswith("ms")
    expect(scored.locator('td[data-label="Circuit"]')).to_have_text("v1 closedv2 closed")
    doomed = page.locator('#models tr[data-model="doomed"]')
    expect(doomed.locator('td[data-label="Versions"]')).to_contain_text("UNAVAILABLE")
    expect(doomed.locator('td[data-label="Versions"] .reason')).to_have_text("unloaded")

    flaky = page.locator('#models tr[data-model="flaky"]')
    expect(flaky.locator('td[data-label="Circuit"]')).to_have_text("v1 open")
    expect(flaky.locator('td[data-label="Errors"]')).to_contain_text("100.0% (4)")  # fallback aside
    expect(flaky.locator('td[data-label="Fallback"]')).to_have_text("BUSINESS (circuit_open): 1")
    transition = page.locator('#events li[data-event="circuit_breaker_transition"]')
    expect(transition.first).to_contain_text("flaky")

    release = page.locator('#releases article[data-model="scored"]')
    expect(release).to_contain_text("progressing")
    expect(release.locator(".weights")).to_contain_text("v1 75%")
    expect(release.locator(".weights")).to_contain_text("v2 25%")
    expect(release).to_contain_text("v1 → v2, step 1 of 2")

    expect(page.locator('#events li[data-event="model_unloaded"]')).to_contain_text("doomed")
    expect(page.locator('#events li[data-event="model_loaded"]').first).to_be_visible()
    names = page.evaluate("[...document.querySelectorAll('#models tbody strong')].map(e => e.textContent)")
    assert names == [HOSTILE, "doomed", "flaky", "scored"]  # the markup shown as text
    assert page.locator("img").count() == 0, "a model's name was read as markup"
    assert page.evaluate("window.__dialogs") is None, "a model's name ran as script"

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "status-page.png"), full_page=True)
    if os.environ.get("UPDATE_DOCS_IMAGES") == "1":  # the docs' copy changes only when asked
        shutil.copyfile(ARTIFACTS / "status-page.png", DOCS_IMAGE)
    assert all(url.startswith(origin + "/") for url in requested), requested  # nothing from elsewhere
    assert {url.removeprefix(origin) for url in requested} >= {"/", "/ui", "/ui/status.css", "/ui/status.js"}


def test_the_page_refreshes_by_itself(busy_server: ServerProcess, browser: Browser) -> None:
    page, _ = open_page(browser, f"http://{busy_server.http_url}/ui")
    errors = page.locator('#models tr[data-model="scored"] td[data-label="Errors"]')
    expect(errors).to_contain_text("(6)", timeout=WAIT_MS)
    for _ in range(3):
        with pytest.raises(InferenceServerException):
            infer(busy_server, width=5)
    expect(errors).to_contain_text("(9)", timeout=WAIT_MS)  # no reload: the page fetched again


def test_the_page_fits_a_phone(busy_server: ServerProcess, browser: Browser) -> None:
    phone = {"viewport": {"width": 390, "height": 844}, "device_scale_factor": 2, "is_mobile": True}
    page, _ = open_page(browser, f"http://{busy_server.http_url}/ui", **phone)
    expect(page.locator('#models tr[data-model="scored"]')).to_be_visible(timeout=WAIT_MS)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390, "no sideways scrolling"
    expect(page.locator("#models thead")).to_be_hidden()  # a card per model, each cell labelled
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "status-page-phone.png"), full_page=True)


def test_the_page_and_its_data_are_served_as_intended(busy_server: ServerProcess) -> None:
    page = busy_server.request("GET", "/ui")
    assert page.status == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert b"scored" not in page.body  # the page holds no data
    data = busy_server.request("GET", "/ui/status.json")
    assert data.status == 200 and data.headers["cache-control"] == "no-store"
    assert [model["name"] for model in data.json()["models"]] == [HOSTILE, "doomed", "flaky", "scored"]
    refused = busy_server.request("POST", "/ui/status.json")
    assert refused.status == 405 and "use GET" in refused.json()["error"]
    assert refused.headers["allow"] == "GET"
    assert busy_server.request("GET", "/ui/nothing-here").status == 404


@pytest.fixture(scope="module")
def auth_server(
    start_server: Callable[..., ServerProcess], tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    root = tmp_path_factory.mktemp("status-auth")
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(KEY.public_key()))
    jwks = root / "jwks.json"
    jwks.write_text(json.dumps({"keys": [{**jwk, "kid": "k1", "alg": "RS256", "use": "sig"}]}))
    return start_server(
        repository(root / "models"),
        "--auth", "jwt",
        "--jwt-jwks", str(jwks),
        "--jwt-issuer", ISSUER,
        "--jwt-audience", AUDIENCE,
        "--jwt-algorithms", "RS256",
    )  # fmt: skip


def test_with_auth_the_data_needs_an_infer_token(auth_server: ServerProcess) -> None:
    assert auth_server.request("GET", "/ui").status == 200  # the page itself is open
    assert auth_server.request("GET", "/ui/status.js").status == 200
    assert auth_server.request("GET", "/ui/status.json").status == 401
    admin_only = {"Authorization": f"Bearer {token('admin')}"}
    assert auth_server.request("GET", "/ui/status.json", headers=admin_only).status == 403
    one_model = {"Authorization": f"Bearer {token('infer:scored')}"}
    seen = auth_server.request("GET", "/ui/status.json", headers=one_model)
    assert seen.status == 200
    assert [model["name"] for model in seen.json()["models"]] == ["scored"]  # not "doomed"


def test_with_auth_the_page_asks_for_a_token_then_shows_the_data(
    auth_server: ServerProcess, browser: Browser
) -> None:
    infer(auth_server, headers={"Authorization": f"Bearer {token('infer')}"})
    page, _ = open_page(browser, f"http://{auth_server.http_url}/ui")
    expect(page.locator("#login")).to_be_visible(timeout=WAIT_MS)
    expect(page.locator('#models tr[data-model="scored"]')).to_have_count(0)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "status-page-login.png"))

    given = token("infer")
    page.fill("#token", given)
    page.click("#login-form button")
    expect(page.locator('#models tr[data-model="scored"]')).to_be_visible(timeout=WAIT_MS)
    expect(page.locator("#login")).to_be_hidden()
    assert page.evaluate("sessionStorage.getItem('conch.status.token')") == given
    assert given not in page.content()  # the token is never written into the page
    page.screenshot(path=str(ARTIFACTS / "status-page-auth.png"), full_page=True)

    page.reload()  # the token stays with the tab: no prompt after a reload
    expect(page.locator('#models tr[data-model="scored"]')).to_be_visible(timeout=WAIT_MS)
    expect(page.locator("#login")).to_be_hidden()

    page.evaluate("sessionStorage.setItem('conch.status.token', 'not-a-token')")
    page.reload()
    expect(page.locator("#login")).to_be_visible(timeout=WAIT_MS)  # a 401 asks again
    expect(page.locator("#login-reason")).to_contain_text("refused")
    assert page.evaluate("sessionStorage.getItem('conch.status.token')") is None
