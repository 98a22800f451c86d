"""conch as a KServe ``ServingRuntime``, and an ``InferenceService`` that uses it.

KServe's storage initializer copies an InferenceService's ``storageUri`` into ``/mnt/models`` before the
predictor starts, so the runtime serves ``/mnt/models`` as its model repository, as KServe's Triton
runtime does: the URI must hold a conch (Triton-style) repository, ``<model>/config.pbtxt`` and
``<model>/<version>/``, for either model format. conch listens on KServe's ports, HTTP 8080 (the port
KServe routes to by default) and gRPC 9000 (Triton runtime's), and keeps metrics on 8002, which the
``prometheus.kserve.io`` annotations point KServe's metrics aggregation at.

Every request reaches conch through KServe's queue-proxy sidecar, which connects from 127.0.0.1 and
appends the address it got the request from to ``X-Forwarded-For``. So the runtime trusts 127.0.0.1
as a proxy: without it every request is 127.0.0.1's, and near the connection cap all clients share
one client's share. It is an environment variable, so an InferenceService can widen it (the ingress
gateway's network) by setting the same variable on its predictor.
"""

from __future__ import annotations

import argparse
from typing import Any

from conch.deploy.kubernetes import RUN_AS, pod_frontends
from conch.deploy.quantities import scaled_memory
from conch.deploy.settings import MEMORY_LIMIT_FACTOR, METRICS_PORT

KSERVE_HTTP_PORT, KSERVE_GRPC_PORT = 8080, 9000
#: Where KServe's queue-proxy sidecar connects from, in the predictor's pod.
QUEUE_PROXY_ADDRESS = "127.0.0.1"
#: Where the storage initializer puts the model repository.
MODEL_MOUNT = "/mnt/models"


def serving_runtime(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "ServingRuntime",
        "metadata": {"name": args.name, "namespace": args.namespace, "labels": _labels(args.name)},
        "spec": {
            "annotations": {
                "prometheus.kserve.io/port": str(METRICS_PORT),
                "prometheus.kserve.io/path": "/metrics",
            },
            "supportedModelFormats": [
                {"name": "onnx", "version": "1", "autoSelect": True},
                {"name": "triton", "version": "2", "autoSelect": True},
            ],
            "protocolVersions": ["v2", "grpc-v2"],
            "multiModel": False,
            "containers": [
                {
                    # KServe finds the predictor's container by this name.
                    "name": "kserve-container",
                    "image": args.image,
                    "args": [
                        "serve",
                        MODEL_MOUNT,
                        f"--http-port={KSERVE_HTTP_PORT}",
                        f"--grpc-port={KSERVE_GRPC_PORT}",
                        f"--metrics-port={METRICS_PORT}",
                    ],
                    "env": [
                        # /mnt/models is read-only: conch's state and caches go to /tmp.
                        {"name": "CONCH_STATE_DIR", "value": "/tmp/conch/state"},
                        {"name": "CONCH_MODEL_CACHE_DIR", "value": "/tmp/conch/s3"},
                        {"name": "CONCH_CACHE_DIR", "value": "/tmp/conch/envs"},
                        {"name": "CONCH_LOG_FORMAT", "value": "json"},
                        {"name": "HOME", "value": "/tmp"},
                        {"name": "CONCH_PROXIES", "value": pod_frontends(args.cpu)},
                        # The client is the one the queue-proxy names in X-Forwarded-For.
                        {"name": "CONCH_HTTP_TRUSTED_PROXIES", "value": QUEUE_PROXY_ADDRESS},
                    ],
                    "resources": _resources(args),
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": RUN_AS,
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


def inference_service(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": args.service_name, "namespace": args.namespace, "labels": _labels(args.name)},
        "spec": {
            "predictor": {
                "model": {
                    "modelFormat": {"name": args.model_format},
                    "runtime": args.name,
                    "protocolVersion": "v2",
                    "storageUri": args.storage_uri,
                    "resources": _resources(args),
                }
            }
        },
    }


def _resources(args: argparse.Namespace) -> dict[str, Any]:
    requests: dict[str, Any] = {"cpu": args.cpu, "memory": args.memory}
    limits: dict[str, Any] = {"memory": scaled_memory(args.memory, MEMORY_LIMIT_FACTOR)}
    if args.gpus:
        requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = str(args.gpus)
    return {"requests": requests, "limits": limits}


def _labels(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "conch", "app.kubernetes.io/instance": name}
