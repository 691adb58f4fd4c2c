"""Kubernetes packaging (deploy/kubernetes): every kustomization renders with a real kustomize, every object it
renders is valid against its schema (kubernetes-validate for Kubernetes' own kinds, prometheus-operator's compiled
validators under node for its custom resources), and the rendered DaemonSet keeps the properties it is built for:
three containers each with only the privileges its job needs, no service-account token, RuntimeDefault seccomp,
limits on every container, the node's name from the downward API, and the alert rules as they are in alerts/."""

from __future__ import annotations

import copy
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from kustomize import DAEMONSET_OVERLAYS, EXAMPLES, KUBERNETES, RENDERED, container, one, pod_spec, render
from tools import checkov

from exporter.cli import build_config, build_parser

try:
    import kubernetes_validate  # type: ignore[import-untyped]
except ImportError:
    pytest.fail("kubernetes-validate is not installed (in the test extra: scripts/test installs it)", pytrace=False)

PROJECT = Path(__file__).resolve().parents[1]
RULES = PROJECT / "alerts" / "rocm-watchdog.rules.yml"
VALIDATORS = Path(__file__).parent / "kubernetes"
# The oldest Kubernetes the manifests are meant for, and the newest the pinned kubernetes-validate knows.
KUBERNETES_VERSIONS = ("1.29.0", "1.37.0")
OPERATOR_GROUP = "monitoring.coreos.com/v1"
STATE_DIR = "/var/lib/rocm-watchdog"
RUNTIME_DEFAULT = {"type": "RuntimeDefault"}
# What checkov still finds in the rendered manifests, and why each stays; any other finding fails the test. The
# issue's three (seccomp CKV_K8S_31, service-account token CKV_K8S_38, CPU limit CKV_K8S_11) must pass.
ACCEPTED_DAEMONSET = {
    "CKV_K8S_16": "kmsg-relay is privileged: nothing else lifts a pod's device cgroup for /dev/kmsg",
    "CKV_K8S_20": "kmsg-relay: Kubernetes refuses allowPrivilegeEscalation: false beside privileged: true",
    "CKV_K8S_23": "prepare-state (chown) and kmsg-relay run as uid 0: a non-root container has no effective capability",
    "CKV_K8S_40": "the same two containers: uid 0 is not a high uid; the exporter runs as 10001",
    "CKV_K8S_25": "each added capability is the one its container needs, after dropping ALL: CHOWN+FOWNER, SYSLOG",
    "CKV_K8S_8": "kmsg-relay serves nothing to probe: it exits on error (restarted); a stuck relay is the exporter's"
    " kernel-log source failing, which the shipped rules alert on",
    "CKV_K8S_9": "kmsg-relay, as CKV_K8S_8",
    "CKV_K8S_43": "the image by tag: no digest can be looked up where this is tested; pin yours with `images:`",
    "CKV_K8S_15": "IfNotPresent: a rebooted node starts its watchdog from the cached image while the registry is down",
}
ACCEPTED_EXAMPLE = {
    "CKV_K8S_21": "the example Job has no namespace: it is applied into yours (kubectl apply -k ... -n <namespace>)",
    "CKV2_K8S_6": "the workload's NetworkPolicy is the workload's business",
    "CKV_K8S_43": ACCEPTED_DAEMONSET["CKV_K8S_43"],
    "CKV_K8S_15": "the workload's pull policy is the workload's business",
}

PREPARE_STATE_ARGS = ["prepare-state", "--state.dir=/var/lib/rocm-watchdog", "--owner=10001:10001"]
KMSG_RELAY_ARGS = ["kmsg-relay", "--from=/dev/kmsg", "--to=/run/rocm-watchdog/kmsg"]
EXPORTER_ARGS = [
    "serve",
    "--path.rootfs=/host",
    "--kernel-log.path=/run/rocm-watchdog/kmsg",
    "--state.dir=/var/lib/rocm-watchdog",
    "--web.listen-address=:9862",
    "--no-collector.amd-smi",
    "--no-collector.rocm-smi",
]


def schema_errors(obj: dict[str, Any]) -> list[str]:
    """kubernetes-validate's findings for one object, strict (unknown fields are errors), at every version."""
    errors = []
    for version in KUBERNETES_VERSIONS:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as err:
            path = ".".join(str(p) for p in err.path)
            errors.append(f"{obj['kind']}/{obj['metadata'].get('name')} @ {version}: {path}: {err.message}")
        except kubernetes_validate.SchemaNotFoundError as err:
            errors.append(err.message)
    return errors


def operator_validation(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run tests/kubernetes/validate.mjs: one ``{kind, name, errors}`` per object."""
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed (Debian nodejs: scripts/test installs it)")
    if not (VALIDATORS / "node_modules" / "@kubernetes-models" / "prometheus-operator").is_dir():
        pytest.fail("tests/kubernetes/node_modules is missing: scripts/test installs it (npm ci)")
    proc = subprocess.run(
        [node, str(VALIDATORS / "validate.mjs")], input=json.dumps(objects), capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    results: list[dict[str, Any]] = json.loads(proc.stdout)
    assert len(results) == len(objects)
    return results


def renderer() -> ModuleType:
    spec = importlib.util.spec_from_file_location("render_prometheusrule", KUBERNETES / "render_prometheusrule.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_kustomization_is_rendered_here() -> None:
    found = set()
    for path in KUBERNETES.rglob("kustomization.yaml"):
        if yaml.safe_load(path.read_text())["kind"] == "Kustomization":
            found.add(path.parent.relative_to(KUBERNETES).as_posix())
    assert found == set(RENDERED)


@pytest.mark.parametrize("directory", RENDERED)
def test_kubernetes_objects_are_valid(directory: str) -> None:
    objects = [o for o in render(directory) if o["apiVersion"] != OPERATOR_GROUP]
    assert objects
    assert [e for o in objects for e in schema_errors(o)] == []


@pytest.mark.parametrize(
    ("directory", "kinds"),
    [
        ("base", set()),
        ("overlays/default", {"ServiceMonitor", "PrometheusRule"}),
        ("overlays/podmonitor", {"PodMonitor", "PrometheusRule"}),
        ("overlays/host-gids", {"ServiceMonitor", "PrometheusRule"}),
        ("examples/gpu-job-preflight", set()),
    ],
)
def test_prometheus_operator_objects_are_valid(directory: str, kinds: set[str]) -> None:
    objects = [o for o in render(directory) if o["apiVersion"] == OPERATOR_GROUP]
    assert {o["kind"] for o in objects} == kinds
    if objects:
        assert [r for r in operator_validation(objects) if r["errors"]] == []


def test_the_validators_reject_broken_objects() -> None:
    def broken_daemonset(path: list[str | int], value: object) -> list[str]:
        daemonset = copy.deepcopy(one(render("overlays/default"), "DaemonSet"))
        node: Any = daemonset["spec"]["template"]["spec"]["containers"][1]
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        return schema_errors(daemonset)

    typo = broken_daemonset(["securityContext", "runAsUsr"], 0)  # a misspelt field must not pass unnoticed
    assert len(typo) == len(KUBERNETES_VERSIONS) and all("'runAsUsr' was unexpected" in e for e in typo)
    port = broken_daemonset(["ports", 0, "containerPort"], "9862")
    assert len(port) == len(KUBERNETES_VERSIONS) and all("is not of type 'integer'" in e for e in port)

    monitor = copy.deepcopy(one(render("overlays/default"), "ServiceMonitor"))
    monitor["spec"]["endpoints"][0]["port"] = 9862  # a port *name* is a string
    rule = copy.deepcopy(one(render("overlays/default"), "PrometheusRule"))
    del rule["spec"]["groups"][0]["rules"][0]["expr"]
    late = copy.deepcopy(one(render("overlays/podmonitor"), "PodMonitor"))
    late["spec"]["podMetricsEndpoints"][0]["interval"] = "30 seconds"
    unknown = {"apiVersion": OPERATOR_GROUP, "kind": "ServiceMonitr", "metadata": {"name": "x"}, "spec": {}}
    other = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}}
    results = operator_validation([monitor, rule, late, unknown, other])
    assert all(r["errors"] for r in results), results
    assert "port must be string" in results[0]["errors"][0]
    assert "expr" in results[1]["errors"][0]
    assert "interval must match pattern" in results[2]["errors"][0]


def test_the_prometheusrule_is_generated_from_the_rules_file() -> None:
    committed = (KUBERNETES / "components" / "prometheusrule" / "prometheusrule.yaml").read_text()
    assert committed == renderer().render(RULES.read_text()), (
        "stale: run python deploy/kubernetes/render_prometheusrule.py"
    )
    groups = yaml.safe_load(RULES.read_text())["groups"]
    for directory in ("overlays/default", "overlays/podmonitor", "overlays/host-gids"):
        assert one(render(directory), "PrometheusRule")["spec"]["groups"] == groups


@pytest.mark.parametrize("directory", DAEMONSET_OVERLAYS)
def test_the_daemonset_keeps_its_security_properties(directory: str) -> None:
    objects = render(directory)
    spec = pod_spec(objects)
    account = one(objects, "ServiceAccount")
    assert spec["serviceAccountName"] == account["metadata"]["name"]
    assert spec["automountServiceAccountToken"] is False and account["automountServiceAccountToken"] is False
    assert spec["securityContext"]["seccompProfile"] == RUNTIME_DEFAULT
    assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC", "shareProcessNamespace"))
    priority = one(objects, "PriorityClass")
    assert spec["priorityClassName"] == priority["metadata"]["name"] and priority["preemptionPolicy"] == "Never"
    assert [c["name"] for c in spec["initContainers"]] == ["prepare-state"]
    assert [c["name"] for c in spec["containers"]] == ["kmsg-relay", "rocm-watchdog"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    image = container(objects, "rocm-watchdog")["image"]
    assert image.startswith("ghcr.io/rocm-watchdog/rocm-watchdog:") and not image.endswith(":latest")

    for c in spec["initContainers"] + spec["containers"]:
        assert c["image"] == image
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        assert c["securityContext"]["seccompProfile"] == RUNTIME_DEFAULT
        assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
        for kind in ("requests", "limits"):
            assert set(c["resources"][kind]) >= {"cpu", "memory"}, (c["name"], kind)

    def mounts(c: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {m["mountPath"]: m for m in c["volumeMounts"]}

    # prepare-state: root for chown, nothing else
    prepare = container(objects, "prepare-state")
    assert prepare["args"] == PREPARE_STATE_ARGS
    context = prepare["securityContext"]
    assert (context["runAsUser"], context["runAsNonRoot"], context["allowPrivilegeEscalation"]) == (0, False, False)
    assert context["capabilities"]["add"] == ["CHOWN", "FOWNER"] and not context.get("privileged")
    state = mounts(prepare)[STATE_DIR]
    assert not state.get("readOnly")
    assert volumes[state["name"]]["hostPath"] == {"path": STATE_DIR, "type": "DirectoryOrCreate"}

    # kmsg-relay: the one privileged process (the device cgroup: see base/daemonset.yaml), reads /dev/kmsg only
    relay = container(objects, "kmsg-relay")
    assert relay["args"] == KMSG_RELAY_ARGS
    context = relay["securityContext"]
    assert (context["runAsUser"], context["runAsNonRoot"], context["privileged"]) == (0, False, True)
    assert context["capabilities"]["add"] == ["SYSLOG"] and "allowPrivilegeEscalation" not in context
    kmsg = mounts(relay)["/dev/kmsg"]
    assert kmsg["readOnly"] is True
    assert volumes[kmsg["name"]]["hostPath"] == {"path": "/dev/kmsg", "type": "CharDevice"}
    relayed = mounts(relay)["/run/rocm-watchdog"]
    assert volumes[relayed["name"]]["emptyDir"]["medium"] == "Memory"
    assert volumes[relayed["name"]]["emptyDir"]["sizeLimit"]
    assert set(mounts(relay)) == {"/dev/kmsg", "/run/rocm-watchdog"}

    # the exporter: uid/gid 10001, no capability, read-only but for its state dir
    exporter = container(objects, "rocm-watchdog")
    assert exporter["args"] == EXPORTER_ARGS
    context = exporter["securityContext"]
    assert (context["runAsUser"], context["runAsGroup"], context["runAsNonRoot"]) == (10001, 10001, True)
    assert context["allowPrivilegeEscalation"] is False and "add" not in context["capabilities"]
    assert not context.get("privileged")
    assert exporter["env"] == [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    host = mounts(exporter)["/host"]
    assert (host["readOnly"], host["mountPropagation"]) == (True, "HostToContainer")
    assert volumes[host["name"]]["hostPath"]["path"] == "/"
    assert mounts(exporter)[STATE_DIR]["name"] == state["name"] and not mounts(exporter)[STATE_DIR].get("readOnly")
    assert mounts(exporter)["/run/rocm-watchdog"] == {**relayed, "readOnly": True}
    assert exporter["ports"] == [{"name": "metrics", "containerPort": 9862, "protocol": "TCP"}]
    assert exporter["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert exporter["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}

    # the host's gids come from an overlay's patch, never from the base
    groups = spec["securityContext"].get("supplementalGroups")
    assert groups == ([109, 44] if directory == "overlays/host-gids" else None)

    # scheduling: AMD GPU nodes, whatever GPU taint they carry
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    keys = {e["key"] for t in terms for e in t["matchExpressions"]}
    assert {"feature.node.kubernetes.io/amd-gpu", "feature.node.kubernetes.io/pci-1200_1002.present"} <= keys
    assert {"key": "amd.com/gpu", "operator": "Exists"} in spec["tolerations"]


@pytest.mark.parametrize("directory", DAEMONSET_OVERLAYS)
def test_every_object_lives_in_the_namespace_and_the_scrape_reaches_the_pods(directory: str) -> None:
    objects = render(directory)
    namespace = one(objects, "Namespace")["metadata"]["name"]
    cluster_scoped = {"Namespace", "PriorityClass"}
    assert {o["metadata"].get("namespace") for o in objects if o["kind"] not in cluster_scoped} == {namespace}
    pod_labels = one(objects, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    service = one(objects, "Service")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9862, "targetPort": "metrics", "protocol": "TCP"}]
    policy = one(objects, "NetworkPolicy")["spec"]  # only the metrics port is let in
    assert policy["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert policy["ingress"] == [{"ports": [{"port": "metrics", "protocol": "TCP"}]}]
    # the shipped rules select job="rocm-watchdog": the job label must come out as that
    for monitor in (o for o in objects if o["kind"] in ("ServiceMonitor", "PodMonitor")):
        target_labels = service["metadata"]["labels"] if monitor["kind"] == "ServiceMonitor" else pod_labels
        assert monitor["spec"]["selector"]["matchLabels"].items() <= target_labels.items()
        assert target_labels[monitor["spec"]["jobLabel"]] == "rocm-watchdog"
        (endpoint,) = monitor["spec"]["endpoints" if monitor["kind"] == "ServiceMonitor" else "podMetricsEndpoints"]
        assert endpoint["port"] == "metrics"
    assert 'job="rocm-watchdog"' in RULES.read_text()


@pytest.mark.parametrize("directory", RENDERED)
def test_every_container_is_given_arguments_the_cli_accepts(directory: str) -> None:
    spec = pod_spec(render(directory))
    for c in spec.get("initContainers", []) + spec["containers"]:
        if c["image"].startswith("ghcr.io/rocm-watchdog/"):
            args = build_parser().parse_args(c["args"])
            if args.command in ("serve", "check"):
                build_config(args)


def test_the_check_example_judges_what_the_pod_was_given() -> None:
    (directory,) = EXAMPLES
    objects = render(directory)
    spec = pod_spec(objects)
    preflight = container(objects, "gpu-preflight")
    assert [c["name"] for c in spec["initContainers"]] == ["gpu-preflight"]
    c = build_config(build_parser().parse_args(preflight["args"]))
    assert preflight["args"][0] == "check"
    # host names from /host/etc, the host's sysfs, the pod's own /dev, the daemon's baseline
    assert (c.rootfs, c.sysfs, c.devfs) == (Path("/host"), Path("/host/sys"), Path("/dev"))
    assert c.state_dir == Path(STATE_DIR)
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounted = {m["mountPath"]: volumes[m["name"]]["hostPath"]["path"] for m in preflight["volumeMounts"]}
    host_files = {"/host/sys": "/sys", "/host/etc/group": "/etc/group", "/host/etc/passwd": "/etc/passwd"}
    assert mounted == {**host_files, STATE_DIR: STATE_DIR}
    assert all(m["readOnly"] is True for m in preflight["volumeMounts"])
    # the same GPU request as the workload, so the device plugin gives the preflight the workload's GPU
    (workload,) = spec["containers"]
    assert preflight["resources"]["limits"]["amd.com/gpu"] == workload["resources"]["limits"]["amd.com/gpu"] == 1
    assert preflight["securityContext"]["allowPrivilegeEscalation"] is False
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["seccompProfile"] == RUNTIME_DEFAULT


def test_the_renderer_refuses_what_is_not_a_rules_file() -> None:
    with pytest.raises(ValueError):
        renderer().render("rules: []\n")
    proc = subprocess.run(
        [sys.executable, str(KUBERNETES / "render_prometheusrule.py"), "--check"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr


def test_checkov_finds_only_what_is_accepted(tmp_path: Path) -> None:
    for directory in RENDERED:
        objects = render(directory)
        (tmp_path / f"{directory.replace('/', '-')}.yaml").write_text(yaml.safe_dump_all(objects, sort_keys=False))
    # --skip-download: no call home for guidelines (the checks ship in the package)
    argv = [checkov(), "--directory", str(tmp_path), "--framework", "kubernetes", "--skip-download", "--output", "json"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    report = json.loads(proc.stdout)
    assert report["summary"]["parsing_errors"] == 0, report["summary"]
    found: dict[str, set[str]] = {}
    for check in report["results"]["failed_checks"]:
        found.setdefault(Path(check["file_path"]).stem, set()).add(check["check_id"])
    for directory in DAEMONSET_OVERLAYS:
        assert found.pop(directory.replace("/", "-")) == set(ACCEPTED_DAEMONSET), directory
    for directory in EXAMPLES:
        assert found.pop(directory.replace("/", "-")) == set(ACCEPTED_EXAMPLE), directory
    assert found == {}
    passed = {(c["check_id"], c["resource"].split(".")[0]) for c in report["results"]["passed_checks"]}
    assert {("CKV_K8S_31", "DaemonSet"), ("CKV_K8S_38", "DaemonSet"), ("CKV_K8S_11", "DaemonSet")} <= passed
