"""``conch deploy kubernetes --streams``: the streams file shipped in a ConfigMap and given to ``conch
serve``, and KEDA's ScaledObject in place of the HorizontalPodAutoscaler, carrying the HPA's own
metric and target beside a redis-streams trigger per stream, with the broker's password only ever
referenced from a Secret. The core kinds pass ``kubernetes-validate --strict``; the KEDA kinds are
checked against KEDA's CRD schema in ``tests/integration/test_deploy_validators.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import promql_parser
import pytest
import yaml

from conch.cli.main import main

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "model_repository"
STREAMS = """\
broker: rediss://scorer@redis.streams:6380/2
password_env: REDIS_PASSWORD
streams:
  - model: iris-pipeline
    input: iris-in
    group: conch
    results: iris-out
    dead_letter: iris-dlq
  - model: iris-autoconfig
    input: auto-in
    group: scorers
    results: auto-out
    dead_letter: auto-dlq
"""
#: The parameters KEDA's documentation lists for each trigger type (keda.sh/docs/2.11/scalers/
#: redis-streams, .../prometheus, .../cpu): a key outside these is one KEDA ignores.
KNOWN_PARAMETERS = {
    "redis-streams": {"address", "host", "port", "usernameFromEnv", "passwordFromEnv", "stream",
                      "consumerGroup", "pendingEntriesCount", "streamLength", "lagCount",
                      "activationLagCount", "enableTLS", "unsafeSsl", "databaseIndex", "addressFromEnv",
                      "hostFromEnv", "portFromEnv"},
    "prometheus": {"serverAddress", "query", "threshold", "activationThreshold", "namespace",
                   "customHeaders", "ignoreNullValues", "queryParameters", "unsafeSsl"},
    "cpu": {"type", "value", "containerName"},
}  # fmt: skip


def read(folder: Path, name: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((folder / name).read_text())
    return document


def deploy(out: Path, *flags: str) -> int:
    return main(["deploy", "kubernetes", str(EXAMPLES), "-o", str(out), *flags])


@pytest.fixture(scope="module")
def streams_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("streams") / "streams.yaml"
    path.write_text(STREAMS)
    return path


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory, streams_file: Path) -> tuple[Path, Path]:
    """The same deploy without streams and with them."""
    root = tmp_path_factory.mktemp("deploys")
    assert deploy(root / "plain") == 0
    assert deploy(root / "streams", "--streams", str(streams_file), "--stream-secret", "redis-auth") == 0
    return root / "plain", root / "streams"


def test_streams_replace_the_hpa_with_one_scaled_object(both: tuple[Path, Path]) -> None:
    plain, streams = both
    assert (plain / "hpa.yaml").exists() and not (plain / "scaledobject.yaml").exists()
    added = {p.name for p in streams.iterdir()} - {p.name for p in plain.iterdir()}
    removed = {p.name for p in plain.iterdir()} - {p.name for p in streams.iterdir()}
    assert added == {"scaledobject.yaml", "triggerauthentication.yaml", "streams-config.yaml"}
    assert removed == {"hpa.yaml"}
    kinds = [read(streams, p.name)["kind"] for p in streams.iterdir()]
    assert "HorizontalPodAutoscaler" not in kinds and kinds.count("ScaledObject") == 1


def test_the_scaled_object_carries_the_hpa_s_target_bounds_and_behaviour(both: tuple[Path, Path]) -> None:
    plain, streams = both
    hpa, scaled = read(plain, "hpa.yaml")["spec"], read(streams, "scaledobject.yaml")
    spec = scaled["spec"]
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    assert spec["scaleTargetRef"] == hpa["scaleTargetRef"]
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (hpa["minReplicas"], hpa["maxReplicas"])
    config = spec["advanced"]["horizontalPodAutoscalerConfig"]
    assert config["behavior"] == hpa["behavior"]
    # KEDA adopts an HPA an earlier deploy left under the Deployment's name, instead of fighting it.
    assert config["name"] == hpa["scaleTargetRef"]["name"]
    assert scaled["metadata"]["annotations"] == {"scaledobject.keda.sh/transfer-hpa-ownership": "true"}
    cpu = [t for t in spec["triggers"] if t["type"] == "cpu"]
    target = hpa["metrics"][0]["resource"]["target"]
    assert cpu == [{"type": "cpu", "metricType": "Utilization",
                    "metadata": {"value": str(target["averageUtilization"])}}]  # fmt: skip


def test_a_redis_streams_trigger_per_stream_from_the_broker_url(both: tuple[Path, Path]) -> None:
    triggers = read(both[1], "scaledobject.yaml")["spec"]["triggers"]
    streams = [t for t in triggers if t["type"] == "redis-streams"]
    assert [(t["metadata"]["stream"], t["metadata"]["consumerGroup"]) for t in streams] == [
        ("iris-in", "conch"),
        ("auto-in", "scorers"),
    ]
    for trigger in streams:
        found = trigger["metadata"]
        assert found["address"] == "redis.streams:6380" and found["databaseIndex"] == "2"
        assert found["enableTLS"] == "true"  # rediss://
        assert found["lagCount"] == "100" and "pendingEntriesCount" not in found
        assert trigger["authenticationRef"] == {"name": "conch-redis"}
    for trigger in triggers:
        assert set(trigger["metadata"]) <= KNOWN_PARAMETERS[trigger["type"]], trigger
        assert all(isinstance(value, str) for value in trigger["metadata"].values()), trigger


def test_the_password_is_referenced_from_the_secret_never_written(both: tuple[Path, Path]) -> None:
    streams = both[1]
    auth = read(streams, "triggerauthentication.yaml")
    assert auth["kind"] == "TriggerAuthentication" and auth["metadata"]["name"] == "conch-redis"
    assert auth["spec"] == {"secretTargetRef": [
        {"parameter": "password", "name": "redis-auth", "key": "password"},
        {"parameter": "username", "name": "redis-auth", "key": "username"},  # the URL names a user
    ]}  # fmt: skip
    conch = read(streams, "deployment.yaml")["spec"]["template"]["spec"]["containers"][0]
    password = [item for item in conch["env"] if item["name"] == "REDIS_PASSWORD"]  # password_env
    assert password == [
        {"name": "REDIS_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "redis-auth", "key": "password"}}}
    ]
    for path in streams.iterdir():
        assert "passwordFromEnv" not in path.read_text()


def test_a_password_file_is_the_secret_mounted_where_the_file_says(tmp_path: Path) -> None:
    path = tmp_path / "streams.yaml"
    path.write_text(STREAMS.replace("password_env: REDIS_PASSWORD", "password_file: /etc/conch/redis/pw"))
    assert deploy(tmp_path / "out", "--streams", str(path), "--stream-secret", "redis-auth") == 0
    deployment = read(tmp_path / "out", "deployment.yaml")
    pod = deployment["spec"]["template"]["spec"]
    assert {"name": "stream-secret", "secret": {"secretName": "redis-auth", "defaultMode": 0o440,
            "items": [{"key": "password", "path": "pw"}]}} in pod["volumes"]  # fmt: skip
    mount = {"name": "stream-secret", "mountPath": "/etc/conch/redis", "readOnly": True}
    assert mount in pod["containers"][0]["volumeMounts"]
    assert not [item for item in pod["containers"][0]["env"] if "valueFrom" in item]
    kubernetes_validate.validate(deployment, kubernetes_validate.latest_version(), strict=True)


@pytest.mark.parametrize(
    ("password", "ca_file", "mounts"),
    [
        # The password and the CA in one folder: one volume with both keys.
        ("password_file: /etc/conch/redis/pw", "/etc/conch/redis/ca.crt",
         {"/etc/conch/redis": [{"key": "password", "path": "pw"}, {"key": "ca.crt", "path": "ca.crt"}]}),
        # In two folders: one volume each.
        ("password_file: /etc/conch/redis/pw", "/etc/ssl/broker/bundle.pem",
         {"/etc/conch/redis": [{"key": "password", "path": "pw"}],
          "/etc/ssl/broker": [{"key": "ca.crt", "path": "bundle.pem"}]}),
        # A password from a variable: only the CA is a file.
        ("password_env: REDIS_PASSWORD", "/etc/ssl/broker/ca.crt",
         {"/etc/ssl/broker": [{"key": "ca.crt", "path": "ca.crt"}]}),
    ],
)  # fmt: skip
def test_a_tls_ca_file_is_the_secrets_ca_mounted_where_the_file_says_and_given_to_keda(
    tmp_path: Path, password: str, ca_file: str, mounts: dict[str, list[dict[str, str]]]
) -> None:
    path = tmp_path / "streams.yaml"
    path.write_text(STREAMS.replace("password_env: REDIS_PASSWORD", f"{password}\ntls_ca_file: {ca_file}"))
    assert deploy(tmp_path / "out", "--streams", str(path), "--stream-secret", "redis-auth") == 0
    deployment = read(tmp_path / "out", "deployment.yaml")
    pod = deployment["spec"]["template"]["spec"]
    volumes = {v["name"]: v["secret"] for v in pod["volumes"] if v["name"].startswith("stream-secret")}
    folders = {
        m["mountPath"]: volumes[m["name"]]["items"]
        for m in pod["containers"][0]["volumeMounts"]
        if m["name"].startswith("stream-secret")
    }
    assert folders == mounts
    assert all(v["secretName"] == "redis-auth" and v["defaultMode"] == 0o440 for v in volumes.values())
    kubernetes_validate.validate(deployment, kubernetes_validate.latest_version(), strict=True)
    auth = read(tmp_path / "out", "triggerauthentication.yaml")["spec"]["secretTargetRef"]
    assert {"parameter": "ca", "name": "redis-auth", "key": "ca.crt"} in auth
    assert {"parameter": "password", "name": "redis-auth", "key": "password"} in auth
    scaled = read(tmp_path / "out", "scaledobject.yaml")["spec"]["triggers"]
    assert all(t["metadata"]["enableTLS"] == "true" for t in scaled if t["type"] == "redis-streams")


def test_a_ca_without_a_password_hands_keda_the_ca_only(tmp_path: Path) -> None:
    path = tmp_path / "streams.yaml"
    path.write_text(_file("rediss://redis:6380/0") + "tls_ca_file: /etc/ssl/broker/ca.crt\n")
    assert deploy(tmp_path / "out", "--streams", str(path), "--stream-secret", "broker-ca") == 0
    auth = read(tmp_path / "out", "triggerauthentication.yaml")["spec"]["secretTargetRef"]
    assert auth == [{"parameter": "ca", "name": "broker-ca", "key": "ca.crt"}]
    conch = read(tmp_path / "out", "deployment.yaml")["spec"]["template"]["spec"]["containers"][0]
    assert not [item for item in conch.get("env", []) if "valueFrom" in item]


@pytest.mark.parametrize(
    ("broker", "extra"),
    [("redis://:s3cret-value@redis:6379/0", ""), ("redis://redis:6379/0", "password: s3cret-value\n")],
)
def test_a_streams_file_holding_a_password_is_refused_without_echoing_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], broker: str, extra: str
) -> None:
    path = tmp_path / "streams.yaml"
    path.write_text(f"{extra}{_file(broker)}")
    with pytest.raises(SystemExit) as exited:
        deploy(tmp_path / "out", "--streams", str(path))
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--stream-secret" in err and "s3cret-value" not in err
    assert not (tmp_path / "out").exists()


def test_the_pods_read_the_shipped_file_and_roll_when_it_changes(
    both: tuple[Path, Path], tmp_path: Path
) -> None:
    streams = both[1]
    config_map, deployment = read(streams, "streams-config.yaml"), read(streams, "deployment.yaml")
    assert config_map["data"] == {"streams.yaml": STREAMS}
    pod = deployment["spec"]["template"]
    conch = pod["spec"]["containers"][0]
    assert conch["args"] == ["serve", "/models", "--streams", "/etc/conch/streams/streams.yaml"]
    assert {"name": "streams", "mountPath": "/etc/conch/streams", "readOnly": True} in conch["volumeMounts"]
    assert {"name": "streams", "configMap": {"name": "conch-streams"}} in pod["spec"]["volumes"]
    for manifest in (config_map, deployment):
        kubernetes_validate.validate(manifest, kubernetes_validate.latest_version(), strict=True)

    changed = tmp_path / "streams.yaml"
    changed.write_text(STREAMS.replace("group: scorers", "group: scorers-2").replace("password_env", "#"))
    assert deploy(tmp_path / "out", "--streams", str(changed)) == 0
    before = pod["metadata"]["annotations"]["conch.dev/streams-sha256"]
    after = read(tmp_path / "out", "deployment.yaml")["spec"]["template"]["metadata"]["annotations"]
    assert after["conch.dev/streams-sha256"] != before
    assert not (tmp_path / "out" / "triggerauthentication.yaml").exists()  # no Secret, no password
    triggers = read(tmp_path / "out", "scaledobject.yaml")["spec"]["triggers"]
    assert all("authenticationRef" not in t for t in triggers)


def test_pending_requests_become_a_prometheus_trigger_with_the_hpa_s_target(
    streams_file: Path, tmp_path: Path
) -> None:
    flags = ["--stream-secret", "redis-auth", "--autoscale-on", "pending-requests",
             "--target-pending-requests", "4", "--name", "scoring", "--namespace", "ml",
             "--stream-scale-on", "pending", "--target-stream-lag", "20"]  # fmt: skip
    assert deploy(tmp_path, "--streams", str(streams_file), *flags) == 0
    triggers = read(tmp_path, "scaledobject.yaml")["spec"]["triggers"]
    prometheus = triggers[-1]
    assert prometheus["type"] == "prometheus"
    assert prometheus["metadata"]["threshold"] == "4"
    assert prometheus["metadata"]["serverAddress"] == "http://prometheus-operated.monitoring.svc:9090"
    query = promql_parser.parse(prometheus["metadata"]["query"])
    assert isinstance(query, promql_parser.AggregateExpr)
    selector = query.expr
    assert isinstance(selector, promql_parser.VectorSelector)
    assert selector.name == "nv_inference_pending_request_count"
    assert {(m.name, m.value) for m in selector.matchers.matchers} == {
        ("job", "scoring"),
        ("namespace", "ml"),
    }
    for trigger in triggers[:-1]:
        assert trigger["metadata"]["pendingEntriesCount"] == "20"
        assert "lagCount" not in trigger["metadata"] and "activationLagCount" not in trigger["metadata"]


def _file(broker: str, model: str = "iris-pipeline") -> str:
    return f"broker: {broker}\nstreams:\n  - {{model: {model}, input: in, results: out, dead_letter: dlq}}\n"


@pytest.mark.parametrize(
    ("text", "flags", "message"),
    [
        (STREAMS, ["--stream-secret", "s"], "--stream-secret is the broker's password: give --streams"),
        (STREAMS, [], "reads the broker's password from REDIS_PASSWORD: give --stream-secret NAME"),
        (
            STREAMS.replace("password_env", "#"),
            ["--stream-secret", "s"],
            "add 'password_env: REDIS_PASSWORD'",
        ),
        (_file("redis://r/0", "nowhere"), [], "names nowhere, which"),
        (_file("http://r/0"), [], "'broker' must start with redis:// or rediss://"),
        (_file("redis://r/zero"), [], "'zero' is not a number"),
        (_file("redis://r").replace(", results: out", ""), [], "streams[0] needs ['results']"),
        (_file("redis://r").replace("results: out", "results: in"), [], "must differ"),
        ("broker: redis://r\nstreams: []\n", [], "'streams' must be a list with one entry"),
        (_file("redis://r") + "maxlenn: 10\n", [], "unknown key(s) ['maxlenn']"),
        (
            _file("rediss://r") + "tls_ca_file: /ca.pem\n",
            [],
            "reads the broker's CA from /ca.pem: give --stream",
        ),
        (_file("rediss://r") + "tls_ca_file: ca.pem\n", [], "'tls_ca_file' must be an absolute path"),
        (
            STREAMS.replace("password_env: REDIS_PASSWORD", "password_file: /r/x\ntls_ca_file: /r/x"),
            ["--stream-secret", "s"],
            "name the same file",
        ),
    ],
)
def test_bad_streams_settings_exit_2_saying_what_to_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, flags: list[str], message: str
) -> None:
    path = tmp_path / "streams.yaml"
    path.write_text(text)
    given = ["--streams", str(path), *flags] if "-secret is the" not in message else flags
    try:
        code = deploy(tmp_path / "out", *given)
    except SystemExit as exited:
        code = int(str(exited.code))
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
