"""``conch deploy TARGET``: manifests a user reads, commits and lets Argo CD or KServe apply.

Targets, one parser each (``conch deploy TARGET --help``):

- ``kubernetes REPO -o DIR``: Deployment, Service, HorizontalPodAutoscaler, PodDisruptionBudget,
  ServiceMonitor and PrometheusRule for serving REPO (``conch/deploy/``); with ``--streams``, KEDA's
  ScaledObject in place of the HPA;
- ``argocd -o DIR``: an Argo CD Application that syncs those manifests from Git;
- ``kserve -o DIR``: a KServe ServingRuntime running conch and an example InferenceService;
- ``monitoring -o DIR``: the alerts and the Grafana dashboard (``conch/cli/deploy_monitoring.py``).

A new target is a function that adds its parser, named in :data:`TARGETS`.

Exit codes: 0 written (warnings allowed), 1 the repository does not validate, 2 a usage error (an
unknown flag, a bad quantity, a bad ``deploy.yaml``). Nothing here imports gRPC when ``conch`` parses its
arguments: the deploy library loads in ``run``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conch.cli.deploy_monitoring import add_monitoring_target, checked_repository
from conch.core.version import VERSION

#: ``conch deploy <target>``: the function that adds the target's parser (and sets its ``run``).
TARGETS: dict[str, Callable[[Any], None]] = {}


def add_parser(commands: Any) -> None:
    deploy: argparse.ArgumentParser = commands.add_parser(
        "deploy",
        help="write Kubernetes, Argo CD or KServe manifests for a model repository",
        description="Write plain manifests to commit to Git: conch deploy kubernetes REPO -o DIR, "
        "conch deploy argocd -o DIR, conch deploy kserve -o DIR, conch deploy monitoring -o DIR. "
        "Guide: conch docs deploy.",
    )
    targets = deploy.add_subparsers(dest="target", required=True, metavar="TARGET")
    for add_target in TARGETS.values():
        add_target(targets)


def _kubernetes(targets: Any) -> None:
    from conch.deploy.settings import KUBERNETES_SETTINGS

    parser: argparse.ArgumentParser = targets.add_parser(
        "kubernetes",
        allow_abbrev=False,  # --replica must not pass for --replicas
        help="Deployment, Service, HPA (or KEDA ScaledObject), PDB, ServiceMonitor, PrometheusRule",
        description="Check REPO (as conch validate does), then write the Kubernetes manifests that serve "
        "it. Settings come from flags, else from --config deploy.yaml (the flags' names as keys), else "
        "the defaults shown.",
    )
    parser.add_argument("repository", type=Path, help="the model repository folder the pods serve")
    _output(parser)
    parser.add_argument("--config", type=Path, help="a deploy.yaml of settings (keys: the flags' names)")
    for setting in KUBERNETES_SETTINGS:
        shown = f" (default {setting.default})" if setting.default is not None else ""
        parser.add_argument(setting.flag, type=setting.parse, default=None, help=setting.help + shown)
    parser.set_defaults(run=_run_kubernetes)


def _argocd(targets: Any) -> None:
    parser: argparse.ArgumentParser = targets.add_parser(
        "argocd",
        allow_abbrev=False,  # --replica must not pass for --replicas
        help="an Argo CD Application syncing the manifests from Git",
        description="Write application.yaml: an Argo CD Application that syncs the manifests "
        "conch deploy kubernetes wrote (and release.yaml beside them) from --repo-url at --path.",
    )
    _output(parser)
    parser.add_argument("--repo-url", required=True, help="the Git repository holding the manifests")
    parser.add_argument("--path", required=True, help="the manifests' folder in that repository")
    parser.add_argument("--revision", default="HEAD", help="branch, tag or commit to follow (default HEAD)")
    parser.add_argument("--name", default="conch", help="the Application's name (default conch)")
    parser.add_argument("--namespace", default="default", help="where the manifests go (default default)")
    parser.add_argument("--argocd-namespace", default="argocd", help="Argo CD's namespace (default argocd)")
    parser.add_argument("--project", default="default", help="the Argo CD project (default default)")
    parser.add_argument(
        "--server",
        default="https://kubernetes.default.svc",
        help="the destination cluster's API (default: the cluster Argo CD runs in)",
    )
    parser.add_argument("--no-automated", action="store_true", help="sync by hand instead of on every push")
    parser.add_argument("--no-prune", action="store_true", help="keep objects removed from Git")
    parser.add_argument("--no-self-heal", action="store_true", help="leave changes made in the cluster")
    parser.set_defaults(run=_run_argocd)


def _kserve(targets: Any) -> None:
    from conch.deploy.settings import KUBERNETES_SETTINGS

    parse = {setting.flag: setting.parse for setting in KUBERNETES_SETTINGS}
    parser: argparse.ArgumentParser = targets.add_parser(
        "kserve",
        allow_abbrev=False,  # --replica must not pass for --replicas
        help="a KServe ServingRuntime for conch and an example InferenceService",
        description="Write servingruntime.yaml (conch for model formats onnx and triton, protocols v2 and "
        "grpc-v2) and inferenceservice.yaml, whose storage URI KServe's storage initializer copies "
        "to /mnt/models, the repository conch serves.",
    )
    _output(parser)
    parser.add_argument("--name", default="conch", help="the ServingRuntime's name (default conch)")
    parser.add_argument("--namespace", default="default", help="namespace of both (default default)")
    parser.add_argument("--image", default=f"conch:{VERSION}", help=f"default conch:{VERSION}")
    parser.add_argument("--service-name", default="conch-models", help="the InferenceService's name")
    parser.add_argument(
        "--storage-uri",
        default="s3://models/repository",
        help="where the model repository lives (s3://, gs://, pvc://...)",
    )
    parser.add_argument(
        "--model-format",
        default="triton",
        choices=("triton", "onnx"),
        help="the InferenceService's model format (default triton: a whole repository)",
    )
    parser.add_argument("--cpu", type=parse["--cpu"], default="1", help="CPU request (default 1)")
    parser.add_argument("--memory", type=parse["--memory"], default="2Gi", help="memory request (2Gi)")
    parser.add_argument("--gpus", type=parse["--gpus"], default=0, help="nvidia.com/gpu (default 0)")
    parser.set_defaults(run=_run_kserve)


def _output(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", type=Path, required=True, help="folder the YAML files go to")


TARGETS.update(kubernetes=_kubernetes, argocd=_argocd, kserve=_kserve, monitoring=add_monitoring_target)


def _run_kubernetes(args: argparse.Namespace) -> int:
    from conch.deploy.manifests import build_files
    from conch.deploy.release_checks import release_warnings
    from conch.deploy.repository_check import gpu_warning
    from conch.deploy.settings import DeploySettingsError, read_deploy_file, resolve
    from conch.deploy.streams import unserved_stream_models
    from conch.deploy.writer import write_manifests
    from conch.validation import NotAModelOrRepositoryError, model_folders

    try:
        file_values = read_deploy_file(args.config) if args.config else {}
        models = len(model_folders(args.repository))
    except (DeploySettingsError, NotAModelOrRepositoryError) as exc:
        print(f"conch deploy: {exc}", file=sys.stderr)
        return 2
    facts = checked_repository(args.repository, models)
    if isinstance(facts, int):
        return facts
    try:
        settings = resolve(args.repository, vars(args), file_values, facts.shm_size, facts.releases)
    except DeploySettingsError as exc:
        print(f"conch deploy: {exc}", file=sys.stderr)
        return 2
    unserved = unserved_stream_models(settings, facts.models)
    if unserved:
        print(
            f"conch deploy: the streams file names {', '.join(unserved)}, which {args.repository} does not "
            f"hold; it serves {', '.join(sorted(facts.models))}. Nothing was written.",
            file=sys.stderr,
        )
        return 2
    if facts.releases and not settings.releases:
        print(
            f"conch deploy: release.yaml of {', '.join(sorted(facts.releases))} not shipped: with --models "
            f"{settings.models} the pods read each model's release.yaml from there",
            file=sys.stderr,
        )
    warning = gpu_warning(facts, settings.gpus)
    if warning:
        print(f"conch deploy: {warning}", file=sys.stderr)
    for warning in release_warnings(settings, facts.releases):
        print(f"conch deploy: {warning}", file=sys.stderr)
    _print_summary(write_manifests(args.output, build_files(settings)))
    return 0


def _run_argocd(args: argparse.Namespace) -> int:
    from conch.deploy.argocd import application
    from conch.deploy.writer import write_manifests

    _print_summary(write_manifests(args.output, [("application.yaml", application(args), "")]))
    return 0


def _run_kserve(args: argparse.Namespace) -> int:
    from conch.deploy.kserve import inference_service, serving_runtime
    from conch.deploy.writer import write_manifests

    files = [
        ("servingruntime.yaml", serving_runtime(args), ""),
        ("inferenceservice.yaml", inference_service(args), ""),
    ]
    _print_summary(write_manifests(args.output, files))
    return 0


def _print_summary(written: list[Any]) -> None:
    from conch.cli.progress import print_table

    rows = [(str(file.path), file.kind, file.name) for file in written]
    print_table(("file", "kind", "name"), rows, title=f"conch deploy: {len(rows)} manifests written")
