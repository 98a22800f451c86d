"""The kinds beyond core Kubernetes, checked by their own projects' validators:

- Argo CD's ``Application``, Prometheus Operator's ``ServiceMonitor`` and ``PrometheusRule``, and KEDA's
  ``ScaledObject`` and ``TriggerAuthentication`` (``--streams``) by the npm packages
  ``@kubernetes-models/argo-cd``, ``@kubernetes-models/prometheus-operator`` and
  ``@kubernetes-models/keda`` (``tests/deploy_validators/validate.mjs``, ``npm ci`` from the pinned
  package-lock.json);
- KServe's ``ServingRuntime`` and ``InferenceService`` loaded into the kserve SDK's models
  (``tests/deploy_validators/kserve_load.py``, in a venv of its own: kserve's pins conflict with conch's).

Both tool sets are installed once into ``~/.cache/conch-deploy-validators`` (a folder per digest of their
pins), so a second run costs only the validations. Each validator is also shown to refuse a broken
manifest, so a pass means something.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from conch.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
VALIDATORS = ROOT / "tests" / "deploy_validators"
EXAMPLES = ROOT / "examples" / "model_repository"
CACHE = Path(os.environ.get("CONCH_DEPLOY_VALIDATORS_CACHE", "~/.cache/conch-deploy-validators")).expanduser()
NPM_FILES = ("package.json", "package-lock.json", "validate.mjs")


def _digest(*paths: Path) -> str:
    return hashlib.sha256(b"".join(path.read_bytes() for path in paths)).hexdigest()[:16]


def _installed(target: Path, install: Callable[[Path], None]) -> Path:
    """``target``, installed by ``install`` into a scratch folder first, so a run cut short leaves none."""
    if target.exists():
        return target
    scratch = target.with_name(target.name + f".partial-{os.getpid()}")
    shutil.rmtree(scratch, ignore_errors=True)
    install(scratch)
    try:
        scratch.rename(target)
    except OSError:  # another run finished first
        shutil.rmtree(scratch, ignore_errors=True)
    return target


@pytest.fixture(scope="module")
def node_validator() -> Path:
    def install(folder: Path) -> None:
        folder.mkdir(parents=True)
        for name in NPM_FILES:
            shutil.copy(VALIDATORS / name, folder / name)
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=folder, check=True, timeout=600
        )

    folder = _installed(CACHE / f"npm-{_digest(*(VALIDATORS / name for name in NPM_FILES))}", install)
    return folder / "validate.mjs"


@pytest.fixture(scope="module")
def kserve_python() -> Path:
    requirements = VALIDATORS / "kserve-requirements.txt"

    def install(folder: Path) -> None:
        subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True, timeout=120)
        pip = [
            str(folder / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "-r",
            str(requirements),
        ]
        subprocess.run(pip, check=True, timeout=600)

    folder = _installed(CACHE / f"kserve-{_digest(requirements)}", install)
    return folder / "bin" / "python"


STREAMS = """\
broker: rediss://redis.streams:6379/0
password_env: REDIS_PASSWORD
streams:
  - {model: iris-pipeline, input: iris-in, group: conch, results: iris-out, dead_letter: iris-dlq}
"""


@pytest.fixture(scope="module")
def manifests(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("manifests")
    assert main(["deploy", "kubernetes", str(EXAMPLES), "-o", str(out)]) == 0
    streams = out / "streams" / "streams.yaml"
    streams.parent.mkdir()
    streams.write_text(STREAMS)
    keda = ["--streams", str(streams), "--stream-secret", "redis-auth"]
    assert main(["deploy", "kubernetes", str(EXAMPLES), "-o", str(out / "keda"), *keda]) == 0
    argocd = ["--repo-url", "https://git.example.com/ml/deploy.git", "--path", "clusters/prod/conch"]
    assert main(["deploy", "argocd", "-o", str(out), *argocd]) == 0
    assert main(["deploy", "kserve", "-o", str(out), "--gpus", "1"]) == 0
    return out


def run_node(script: Path, *files: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["node", str(script), *map(str, files)], capture_output=True, text=True, timeout=120
    )


def run_kserve(python: Path, *files: Path) -> subprocess.CompletedProcess[str]:
    script = VALIDATORS / "kserve_load.py"
    return subprocess.run(
        [str(python), str(script), *map(str, files)], capture_output=True, text=True, timeout=120
    )


def edited(source: Path, target: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    document = yaml.safe_load(source.read_text())
    change(document)
    target.write_text(yaml.safe_dump(document))
    return target


def test_argo_cd_and_prometheus_operator_kinds_validate(node_validator: Path, manifests: Path) -> None:
    files = [manifests / name for name in ("application.yaml", "servicemonitor.yaml", "prometheusrule.yaml")]
    checked = run_node(node_validator, *files)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count("PASS ") == 3
    for kind in ("Application", "ServiceMonitor", "PrometheusRule"):
        assert kind in checked.stdout


def test_keda_kinds_validate(node_validator: Path, manifests: Path) -> None:
    keda = manifests / "keda"
    checked = run_node(node_validator, keda / "scaledobject.yaml", keda / "triggerauthentication.yaml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "PASS" in checked.stdout and "FAIL" not in checked.stdout
    assert "ScaledObject conch" in checked.stdout and "TriggerAuthentication conch-redis" in checked.stdout


def test_the_keda_validator_refuses_broken_manifests(
    node_validator: Path, manifests: Path, tmp_path: Path
) -> None:
    def replicas_as_text(doc: dict[str, Any]) -> None:
        doc["spec"]["minReplicaCount"] = "two"

    def trigger_without_type(doc: dict[str, Any]) -> None:
        del doc["spec"]["triggers"][0]["type"]

    def number_parameter(doc: dict[str, Any]) -> None:
        doc["spec"]["triggers"][0]["metadata"]["lagCount"] = 100

    def secret_refs_as_mapping(doc: dict[str, Any]) -> None:
        doc["spec"]["secretTargetRef"] = {"parameter": "password"}

    scaled, auth = manifests / "keda" / "scaledobject.yaml", manifests / "keda" / "triggerauthentication.yaml"
    cases = {
        "minReplicaCount must be integer": edited(scaled, tmp_path / "s1.yaml", replicas_as_text),
        "must have required property type": edited(scaled, tmp_path / "s2.yaml", trigger_without_type),
        "lagCount must be string": edited(scaled, tmp_path / "s3.yaml", number_parameter),
        "secretTargetRef must be array": edited(auth, tmp_path / "t.yaml", secret_refs_as_mapping),
    }
    for message, broken in cases.items():
        checked = run_node(node_validator, broken)
        assert checked.returncode == 1, checked.stdout
        assert "FAIL" in checked.stdout and message in checked.stdout, checked.stdout


def test_the_npm_validators_refuse_broken_manifests(
    node_validator: Path, manifests: Path, tmp_path: Path
) -> None:
    def prune_as_text(doc: dict[str, Any]) -> None:
        doc["spec"]["syncPolicy"]["automated"]["prune"] = "yes"

    def endpoints_as_mapping(doc: dict[str, Any]) -> None:
        doc["spec"]["endpoints"] = {"port": "metrics"}

    def rule_without_expr(doc: dict[str, Any]) -> None:
        del doc["spec"]["groups"][0]["rules"][0]["expr"]

    broken = [
        edited(manifests / "application.yaml", tmp_path / "a.yaml", prune_as_text),
        edited(manifests / "servicemonitor.yaml", tmp_path / "s.yaml", endpoints_as_mapping),
        edited(manifests / "prometheusrule.yaml", tmp_path / "p.yaml", rule_without_expr),
    ]
    checked = run_node(node_validator, *broken)
    assert checked.returncode == 1
    assert checked.stdout.count("FAIL ") == 3 and "PASS" not in checked.stdout
    assert "prune must be boolean" in checked.stdout


def test_kserve_kinds_load_into_the_sdk_models(kserve_python: Path, manifests: Path) -> None:
    checked = run_kserve(
        kserve_python, manifests / "servingruntime.yaml", manifests / "inferenceservice.yaml"
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "PASS" in checked.stdout and "ServingRuntime conch" in checked.stdout
    assert "InferenceService conch-models" in checked.stdout


def test_the_kserve_sdk_refuses_broken_manifests(
    kserve_python: Path, manifests: Path, tmp_path: Path
) -> None:
    def multi_model_as_text(doc: dict[str, Any]) -> None:
        doc["spec"]["multiModel"] = "no"

    def misspelt_field(doc: dict[str, Any]) -> None:
        doc["spec"]["protocolVersion"] = doc["spec"].pop("protocolVersions")

    def no_predictor(doc: dict[str, Any]) -> None:
        doc["spec"] = {"predictor": None}

    runtime, service = manifests / "servingruntime.yaml", manifests / "inferenceservice.yaml"
    cases = {
        "expected bool, got str 'no'": edited(runtime, tmp_path / "r1.yaml", multi_model_as_text),
        "has no field protocolVersion": edited(runtime, tmp_path / "r2.yaml", misspelt_field),
        # The SDK's own client-side validation: predictor is required.
        "predictor": edited(service, tmp_path / "i.yaml", no_predictor),
    }
    for message, broken in cases.items():
        checked = run_kserve(kserve_python, broken)
        assert checked.returncode == 1, checked.stdout
        assert "FAIL" in checked.stdout and message in checked.stdout


def test_the_serving_runtime_serves_mnt_models_on_kserve_ports(manifests: Path) -> None:
    runtime = yaml.safe_load((manifests / "servingruntime.yaml").read_text())["spec"]
    assert {f["name"] for f in runtime["supportedModelFormats"]} == {"onnx", "triton"}
    assert runtime["protocolVersions"] == ["v2", "grpc-v2"]
    conch = runtime["containers"][0]
    assert conch["name"] == "kserve-container"
    assert conch["args"][:2] == ["serve", "/mnt/models"] and "--http-port=8080" in conch["args"]
    assert conch["resources"]["limits"]["nvidia.com/gpu"] == "1"
    service = yaml.safe_load((manifests / "inferenceservice.yaml").read_text())["spec"]["predictor"]["model"]
    assert service["runtime"] == "conch" and service["modelFormat"] == {"name": "triton"}


@pytest.mark.parametrize(
    ("flags", "policy"),
    [
        ([], {"syncOptions": ["CreateNamespace=true"], "automated": {"prune": True, "selfHeal": True}}),
        (["--no-prune", "--no-self-heal"],
         {"syncOptions": ["CreateNamespace=true"], "automated": {"prune": False, "selfHeal": False}}),
        (["--no-automated"], {"syncOptions": ["CreateNamespace=true"]}),
    ],
)  # fmt: skip
def test_argocd_sync_policy_flags(
    node_validator: Path, tmp_path: Path, flags: list[str], policy: dict[str, Any]
) -> None:
    source = ["--repo-url", "https://git.example.com/ml/deploy.git", "--path", "conch", "--revision", "main"]
    assert main(["deploy", "argocd", "-o", str(tmp_path), *source, *flags]) == 0
    application = yaml.safe_load((tmp_path / "application.yaml").read_text())
    assert application["spec"]["syncPolicy"] == policy
    assert application["spec"]["source"] == {"repoURL": source[1], "targetRevision": "main", "path": "conch"}
    assert run_node(node_validator, tmp_path / "application.yaml").returncode == 0
