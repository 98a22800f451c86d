"""The Argo CD ``Application`` that keeps a cluster in step with the manifests in Git.

Automated sync with prune and self-heal by default: Git is then the only way to change the deployment
(an object deleted from Git is deleted from the cluster, a hand edit in the cluster is undone), which
is what makes a pushed commit, a model version or a ``release.yaml``, the record of what runs.
``--no-automated``, ``--no-prune`` and ``--no-self-heal`` relax that, one rule each.
"""

from __future__ import annotations

import argparse
from typing import Any


def application(args: argparse.Namespace) -> dict[str, Any]:
    sync: dict[str, Any] = {"syncOptions": ["CreateNamespace=true"]}
    if not args.no_automated:
        sync["automated"] = {"prune": not args.no_prune, "selfHeal": not args.no_self_heal}
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {
            "name": args.name,
            "namespace": args.argocd_namespace,
            "labels": {"app.kubernetes.io/name": "conch", "app.kubernetes.io/instance": args.name},
        },
        "spec": {
            "project": args.project,
            "source": {"repoURL": args.repo_url, "targetRevision": args.revision, "path": args.path},
            "destination": {"server": args.server, "namespace": args.namespace},
            "syncPolicy": sync,
        },
    }
