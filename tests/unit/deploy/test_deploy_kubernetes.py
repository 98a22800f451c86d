"""``conch deploy kubernetes`` on the embedded repository: what the manifests say, checked by
``kubernetes-validate --strict`` (the Kubernetes OpenAPI schemas), and the refusals of bad input."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from conch.cli.main import build_parser, main
from conch.deploy.quantities import QuantityError, parse_quantity, scaled_memory
from conch.http_server.peers import TrustedProxies

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "model_repository"
CORE_FILES = ("deployment.yaml", "service.yaml", "hpa.yaml", "pdb.yaml")


def read(folder: Path, name: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((folder / name).read_text())
    return document


def strictly_valid(manifest: dict[str, Any]) -> None:
    kubernetes_validate.validate(manifest, kubernetes_validate.latest_version(), strict=True)


@pytest.fixture(scope="module")
def manifests(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("manifests")
    assert (
        main(
            [
                "deploy",
                "kubernetes",
                str(EXAMPLES),
                "-o",
                str(out),
                "--memory",
                "4Gi",
                "--exit-timeout-secs",
                "60",
            ]
        )
        == 0
    )
    return out


def container(manifests: Path) -> dict[str, Any]:
    spec: dict[str, Any] = read(manifests, "deployment.yaml")["spec"]["template"]["spec"]
    return spec["containers"][0]


def test_it_writes_every_manifest_and_a_summary(manifests: Path) -> None:
    written = sorted(path.name for path in manifests.iterdir())
    assert written == sorted([*CORE_FILES, "servicemonitor.yaml", "prometheusrule.yaml"])
    kinds = {read(manifests, name)["kind"] for name in written}
    assert kinds == {"Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget",
                     "ServiceMonitor", "PrometheusRule"}  # fmt: skip


@pytest.mark.parametrize("name", CORE_FILES)
def test_core_kinds_pass_kubernetes_validate_strict(manifests: Path, name: str) -> None:
    strictly_valid(read(manifests, name))


def test_the_alternate_autoscaler_is_valid_too(manifests: Path) -> None:
    comments = [
        line[2:] for line in (manifests / "hpa.yaml").read_text().splitlines() if line.startswith("# ")
    ]
    alternate = yaml.safe_load("\n".join(comments[comments.index("apiVersion: autoscaling/v2") :]))
    assert alternate["spec"]["metrics"][0]["pods"]["metric"]["name"] == "nv_inference_pending_request_count"
    strictly_valid(alternate)


def test_a_strict_validator_really_refuses(manifests: Path) -> None:
    broken = read(manifests, "deployment.yaml")
    broken["spec"]["template"]["spec"]["containers"][0]["resourcez"] = {}
    with pytest.raises(kubernetes_validate.ValidationError, match="resourcez"):
        strictly_valid(broken)
    wrong_type = read(manifests, "hpa.yaml")
    wrong_type["spec"]["minReplicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        strictly_valid(wrong_type)


def test_memory_limit_is_1_3_times_the_request(manifests: Path) -> None:
    resources = container(manifests)["resources"]
    assert resources["requests"]["memory"] == "4Gi"
    assert parse_quantity(resources["limits"]["memory"], "limit") >= parse_quantity("4Gi", "r") * 13 // 10
    assert resources["limits"]["memory"] == "5325Mi"
    assert "cpu" not in resources["limits"] and "nvidia.com/gpu" not in resources["requests"]


def test_probes_and_stopping(manifests: Path) -> None:
    pod = read(manifests, "deployment.yaml")["spec"]["template"]["spec"]
    conch = pod["containers"][0]
    startup = conch["startupProbe"]
    assert startup["httpGet"]["path"] == "/v2/health/live"
    assert startup["periodSeconds"] * startup["failureThreshold"] == 180
    assert conch["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert conch["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    sleep = int(conch["lifecycle"]["preStop"]["exec"]["command"][1])
    assert {"name": "CONCH_EXIT_TIMEOUT_SECS", "value": "60"} in conch["env"]
    assert pod["terminationGracePeriodSeconds"] > sleep + 60


def test_non_root_read_only_root_and_writable_folders(manifests: Path) -> None:
    pod = read(manifests, "deployment.yaml")["spec"]["template"]["spec"]
    conch = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert conch["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {mount["mountPath"]: mount["name"] for mount in conch["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    env = {item["name"]: item["value"] for item in conch["env"]}
    for variable in ("CONCH_MODEL_CACHE_DIR", "CONCH_CACHE_DIR", "CONCH_STATE_DIR"):
        assert "emptyDir" in volumes[mounts[env[variable]]], variable
    assert env["CONCH_AUDIT_LOG"].startswith("/var/log/conch/")
    assert volumes[mounts["/var/log/conch"]]["emptyDir"] == {"sizeLimit": "512Mi"}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    shm = volumes[mounts["/dev/shm"]]["emptyDir"]
    assert shm["medium"] == "Memory" and shm["sizeLimit"] == "64Mi"  # one Python instance (text-length)


def test_service_ports_and_scraping(manifests: Path) -> None:
    ports = {port["name"]: port["port"] for port in read(manifests, "service.yaml")["spec"]["ports"]}
    assert ports == {"http": 8000, "grpc": 8001, "metrics": 8002}
    endpoint = read(manifests, "servicemonitor.yaml")["spec"]["endpoints"][0]
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"


def test_frontends_follow_the_pods_cpu_not_the_nodes_cores(manifests: Path, tmp_path: Path) -> None:
    # One CPU requested (the default): no frontends, though the node may have 64 cores to see.
    env = {item["name"]: item["value"] for item in container(manifests)["env"]}
    assert env["CONCH_PROXIES"] == "0"
    for flags, frontends in (
        (["--cpu", "8"], "8"),
        (["--cpu", "2", "--cpu-limit", "32"], "16"),
        (["--cpu", "7500m"], "0"),
    ):
        out = tmp_path / "-".join(flags)
        assert main(["deploy", "kubernetes", str(EXAMPLES), "-o", str(out), *flags]) == 0
        env = {item["name"]: item["value"] for item in container(out)["env"]}
        assert env["CONCH_PROXIES"] == frontends, flags


def test_gpu_request_and_its_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["deploy", "kubernetes", str(EXAMPLES), "-o", str(tmp_path), "--gpus", "2"]) == 0
    resources = container(tmp_path)["resources"]
    assert resources["requests"]["nvidia.com/gpu"] == resources["limits"]["nvidia.com/gpu"] == "2"
    strictly_valid(read(tmp_path, "deployment.yaml"))
    assert "no model of the repository has a KIND_GPU instance group" in capsys.readouterr().err


def test_no_warning_when_a_model_uses_the_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repository = tmp_path / "repo"
    shutil.copytree(EXAMPLES / "iris-pipeline", repository / "iris-pipeline")
    config = repository / "iris-pipeline" / "config.pbtxt"
    config.write_text(config.read_text().replace("kind: KIND_CPU", "kind: KIND_GPU"))
    assert main(["deploy", "kubernetes", str(repository), "-o", str(tmp_path / "out"), "--gpus", "1"]) == 0
    assert "KIND_GPU" not in capsys.readouterr().err


def test_deploy_file_settings_and_flags_over_them(tmp_path: Path) -> None:
    settings = tmp_path / "deploy.yaml"
    settings.write_text("namespace: serving\nreplicas: 3\nmemory: 1Gi\nmodels: pvc:model-repository\n")
    out = tmp_path / "out"
    assert (
        main(
            [
                "deploy",
                "kubernetes",
                str(EXAMPLES),
                "-o",
                str(out),
                "--config",
                str(settings),
                "--replicas",
                "4",
            ]
        )
        == 0
    )
    assert read(out, "hpa.yaml")["spec"]["minReplicas"] == 4
    deployment = read(out, "deployment.yaml")
    assert deployment["metadata"]["namespace"] == "serving"
    assert container(out)["resources"]["limits"]["memory"] == scaled_memory("1Gi", 1.3) == "1332Mi"
    claims = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if "persistentVolumeClaim" in v]
    assert claims == [{"name": "models", "persistentVolumeClaim": {"claimName": "model-repository"}}]
    strictly_valid(deployment)


def test_s3_models_and_their_secret(tmp_path: Path) -> None:
    args = ["--models", "s3://models/prod", "--s3-secret", "object-store"]
    assert main(["deploy", "kubernetes", str(EXAMPLES), "-o", str(tmp_path), *args]) == 0
    conch = container(tmp_path)
    assert conch["args"] == ["serve", "s3://models/prod"]
    assert conch["envFrom"] == [{"secretRef": {"name": "object-store"}}]
    strictly_valid(read(tmp_path, "deployment.yaml"))


def test_a_tls_secret_is_mounted_for_both_ports_and_the_probes_use_https(tmp_path: Path) -> None:
    assert (
        main(["deploy", "kubernetes", str(EXAMPLES), "-o", str(tmp_path), "--tls-secret", "conch-tls"]) == 0
    )
    deployment = read(tmp_path, "deployment.yaml")
    strictly_valid(deployment)
    pod = deployment["spec"]["template"]["spec"]
    conch = pod["containers"][0]
    env = {variable["name"]: variable["value"] for variable in conch["env"]}
    for port in ("HTTP", "GRPC"):
        assert env[f"CONCH_{port}_USE_SSL"] == "true"
        assert env[f"CONCH_{port}_SERVER_CERT"] == "/etc/conch/tls/tls.crt"
        assert env[f"CONCH_{port}_SERVER_KEY"] == "/etc/conch/tls/tls.key"
    assert {"name": "tls", "secret": {"secretName": "conch-tls", "defaultMode": 0o440}} in pod["volumes"]
    assert {"name": "tls", "mountPath": "/etc/conch/tls", "readOnly": True} in conch["volumeMounts"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert conch[probe]["httpGet"]["scheme"] == "HTTPS"
    service = read(tmp_path, "service.yaml")
    strictly_valid(service)
    grpc = next(port for port in service["spec"]["ports"] if port["name"] == "grpc")
    assert "appProtocol" not in grpc


def test_without_a_tls_secret_the_pods_serve_plain_text(manifests: Path) -> None:
    conch = container(manifests)
    assert not any(variable["name"].endswith("_USE_SSL") for variable in conch["env"])
    assert conch["readinessProbe"]["httpGet"]["scheme"] == "HTTP"
    grpc = next(port for port in read(manifests, "service.yaml")["spec"]["ports"] if port["name"] == "grpc")
    assert grpc["appProtocol"] == "kubernetes.io/h2c"


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--memory", "4Gb"], "argument --memory: '4Gb' is not a Kubernetes quantity"),
        (["--cpu", "two"], "argument --cpu: 'two' is not a Kubernetes quantity"),
        (["--models", "nfs:/x"], "argument --models: 'nfs:/x' is not a model source"),
        (["--replica", "3"], "unrecognized arguments: --replica"),
    ],
)
def test_bad_flags_exit_2_naming_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], named: str
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["deploy", "kubernetes", str(EXAMPLES), "-o", str(tmp_path / "out"), *args])
    assert stopped.value.code == 2
    assert named in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("memory: 4Gb\n", "deploy.yaml 'memory': '4Gb' is not a Kubernetes quantity"),
        ("replica: 3\n", "unknown setting 'replica'"),
    ],
)
def test_bad_deploy_file_exits_2_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, named: str
) -> None:
    settings = tmp_path / "deploy.yaml"
    settings.write_text(text)
    assert (
        main(["deploy", "kubernetes", str(EXAMPLES), "-o", str(tmp_path / "out"), "--config", str(settings)])
        == 2
    )
    assert named in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_repository_that_does_not_validate_stops_with_its_findings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repository = tmp_path / "repo"
    shutil.copytree(EXAMPLES / "iris-pipeline", repository / "iris-pipeline")
    (repository / "iris-pipeline" / "config.pbtxt").write_text('name: "iris-pipeline"\nmax_batch_size: [\n')
    assert main(["deploy", "kubernetes", str(repository), "-o", str(tmp_path / "out")]) == 1
    captured = capsys.readouterr()
    assert "config-unparsable" in captured.out
    assert "does not validate" in captured.err and "Nothing was written" in captured.err
    assert not (tmp_path / "out").exists()


def test_quantities() -> None:
    assert parse_quantity("500m", "cpu") * 2 == 1
    assert parse_quantity("1Ki", "m") == 1024 and parse_quantity("1e3", "m") == 1000
    assert scaled_memory("2Gi", 1.3) == "2663Mi" and scaled_memory("1000Mi", 1.024) == "1Gi"
    for bad in ("4Gb", "", "1.2.3", "-1Gi", "Gi"):
        with pytest.raises(QuantityError):
            parse_quantity(bad, "--memory")


def test_every_setting_has_a_row_in_the_deploy_guide() -> None:
    from conch.deploy.settings import KUBERNETES_SETTINGS

    guide = (Path(__file__).resolve().parents[3] / "docs" / "deploy.md").read_text()
    missing = [s.flag for s in KUBERNETES_SETTINGS if f"| `{s.flag}` |" not in guide]
    assert not missing, f"docs/deploy.md's reference has no row for {missing}"


def test_deep_readiness_and_the_pending_requests_autoscaler(tmp_path: Path) -> None:
    flags = ["--readiness", "deep", "--autoscale-on", "pending-requests", "--target-pending-requests", "4"]
    assert (
        main(
            [
                "deploy",
                "kubernetes",
                str(EXAMPLES),
                "-o",
                str(tmp_path),
                "--models",
                "hostpath:/srv/models",
                *flags,
            ]
        )
        == 0
    )
    readiness = container(tmp_path)["readinessProbe"]
    assert readiness["httpGet"]["path"] == "/v2/health/deep"
    assert readiness["timeoutSeconds"] * 1000 > 1000  # above --health-probe-timeout-ms's default
    hpa = read(tmp_path, "hpa.yaml")
    assert hpa["spec"]["metrics"] == [
        {"type": "Pods", "pods": {"metric": {"name": "nv_inference_pending_request_count"},
                                  "target": {"type": "AverageValue", "averageValue": "4"}}}
    ]  # fmt: skip
    assert (
        "type: Resource" in (tmp_path / "hpa.yaml").read_text().split("apiVersion: autoscaling/v2\nkind")[0]
    )
    volumes = read(tmp_path, "deployment.yaml")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "models", "hostPath": {"path": "/srv/models", "type": "Directory"}} in volumes
    for name in ("deployment.yaml", "hpa.yaml"):
        strictly_valid(read(tmp_path, name))


def test_the_kserve_runtime_sets_frontends_from_its_cpu_too(tmp_path: Path) -> None:
    for cpu, frontends in (("1", "0"), ("16", "16")):
        assert main(["deploy", "kserve", "-o", str(tmp_path / cpu), "--cpu", cpu]) == 0
        runtime = read(tmp_path / cpu, "servingruntime.yaml")
        env = {item["name"]: item["value"] for item in runtime["spec"]["containers"][0]["env"]}
        assert env["CONCH_PROXIES"] == frontends


def test_the_kserve_runtime_takes_the_client_the_queue_proxy_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """KServe's queue-proxy connects from 127.0.0.1 and appends the address it got the request from to
    X-Forwarded-For: conch serve, started as the runtime's container is, takes that client for its
    share of the connections, and a header from any other peer is not believed."""
    assert main(["deploy", "kserve", "-o", str(tmp_path)]) == 0
    container = read(tmp_path, "servingruntime.yaml")["spec"]["containers"][0]
    env = {item["name"]: item["value"] for item in container["env"]}
    assert env["CONCH_HTTP_TRUSTED_PROXIES"] == "127.0.0.1"
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    served = build_parser().parse_args(container["args"])
    proxies = TrustedProxies(served.http_trusted_proxies, served.http_client_ip_header)
    forwarded = [(b"x-forwarded-for", b"198.51.100.1, 203.0.113.7")]
    assert proxies.client_of("127.0.0.1", forwarded) == "203.0.113.7"
    assert proxies.client_of("10.0.0.5", forwarded) == "10.0.0.5"
