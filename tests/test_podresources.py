"""Kubernetes attribution: the pod-resources wire decoder (a golden message written byte by byte from the published
api.proto field numbers), the source against a real gRPC server on a unix socket, and the join of pod, namespace
and container to GPUs and KFD processes over a fake root."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from fakeroot import FakeGpu, FakeXcp, build_root
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs
from test_process_gpu_vram import host_process, kfd_process

from exporter.config import Config
from exporter.metrics.collector import make_registry
from exporter.metrics.gpu import gpu_owners, process_owner
from exporter.model import ParseError
from exporter.model.processes import DeviceAllocation, ProcessGpu, ProcessInfo
from exporter.parsers.podresources import decode_list_response
from exporter.scheduler import run_source
from exporter.sources import Source, SourceError
from exporter.sources.podresources import PodResourcesSource
from exporter.sources.processes import ProcessesSource
from exporter.sources.registry import build_jobs
from exporter.sources.sysfs import SysfsSource
from exporter.store import SnapshotStore

# ListPodResourcesResponse, written out by hand from kubernetes staging/src/k8s.io/kubelet/pkg/apis/podresources/v1/
# api.proto. A tag byte is (field number << 3) | wire type, wire type 2 (LEN) for strings and messages, 0 for
# varints; every length is counted by hand. It holds what a kubelet sends beyond what is read (topology, cpu_ids,
# memory), so skipping works on real shapes.
GOLDEN = bytes.fromhex(
    "0a57"  # ListPodResourcesResponse.pod_resources = 1, LEN 87
    "0a07" "747261696e2d30"  # PodResources.name = 1: "train-0"
    "1202" "6d6c"  # PodResources.namespace = 2: "ml"
    "1a48"  # PodResources.containers = 3, LEN 72
    "0a04" "726f636d"  # ContainerResources.name = 1: "rocm"
    "122f"  # ContainerResources.devices = 2, LEN 47
    "0a0b" "616d642e636f6d2f677075"  # ContainerDevices.resource_name = 1: "amd.com/gpu"
    "120c" "303030303a63313a30302e30"  # ContainerDevices.device_ids = 2: "0000:c1:00.0"
    "120c" "616d646770755f7863702e33"  # ContainerDevices.device_ids = 2: "amdgpu_xcp.3"
    "1a04" "0a02" "0801"  # ContainerDevices.topology = 3 { TopologyInfo.nodes = 1 { NUMANode.ID = 1: 1 } }
    "1a02" "0203"  # ContainerResources.cpu_ids = 3, packed: 2, 3
    "220b" "0a06" "6d656d6f7279" "108008"  # ContainerResources.memory = 4 { memory_type = 1: "memory", size = 2: 1024 }
)  # fmt: skip

ROCM = ("ml", "train-0", "rocm")


def test_golden_message_decodes() -> None:
    assert len(GOLDEN) == 89
    assert decode_list_response(GOLDEN) == (
        DeviceAllocation("ml", "train-0", "rocm", "amd.com/gpu", "0000:c1:00.0"),
        DeviceAllocation("ml", "train-0", "rocm", "amd.com/gpu", "amdgpu_xcp.3"),
    )
    assert decode_list_response(b"") == ()  # a node without pods


def test_every_truncation_is_a_parse_error() -> None:
    for cut in range(1, len(GOLDEN)):
        with pytest.raises(ParseError):
            decode_list_response(GOLDEN[:cut])


# A test-side encoder for the messages the server sends; field numbers written out, not taken from the decoder.
def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _len(field: int, payload: bytes | str) -> bytes:
    data = payload.encode() if isinstance(payload, str) else payload
    return _varint(field << 3 | 2) + _varint(len(data)) + data


def pod(namespace: str, name: str, containers: dict[str, list[tuple[str, list[str]]]]) -> bytes:
    body = _len(1, name) + _len(2, namespace)
    for cname, devices in containers.items():
        c = _len(1, cname)
        for resource, ids in devices:
            c += _len(2, _len(1, resource) + b"".join(_len(2, i) for i in ids))
        body += _len(3, c)
    return _len(1, body)


def test_unknown_fields_of_every_wire_type_are_skipped() -> None:
    unknown = (
        _varint(15 << 3 | 0) + _varint(300)  # VARINT
        + _varint(16 << 3 | 1) + bytes(8)  # I64
        + _varint(17 << 3 | 5) + bytes(4)  # I32
        + _len(18, b"\xff\x00anything")  # LEN
        + _varint(19 << 3 | 3) + _varint(1 << 3 | 0) + b"\x01" + _varint(19 << 3 | 4)  # a proto2 group
        + _varint(1 << 3 | 0) + b"\x07"  # a known field number with an unexpected wire type
    )  # fmt: skip
    container = _len(1, "main") + unknown + _len(2, _len(1, "amd.com/gpu") + unknown + _len(2, "0000:03:00.0"))
    message = unknown + _len(1, _len(1, "p") + unknown + _len(2, "ns") + _len(3, container)) + unknown
    assert decode_list_response(message) == (DeviceAllocation("ns", "p", "main", "amd.com/gpu", "0000:03:00.0"),)


@pytest.mark.parametrize(
    "data",
    [
        b"\x0a\x05abc",  # a length past the end
        b"\x0a",  # a tag without its value
        b"\x08\x80\x80",  # a varint cut short
        b"\x08" + b"\xff" * 10 + b"\x01",  # a varint longer than ten bytes
        b"\x00\x00",  # field number 0
        b"\x0e",  # wire type 6 does not exist
        b"\x0c",  # an end-group without a start
        b"\x0b\x08\x01",  # a group never closed
        b"\x0b\x14",  # a group closed by another field's end
        b"\x09\x00\x00",  # an I64 cut short
    ],
)
def test_malformed_input_is_a_parse_error(data: bytes) -> None:
    with pytest.raises(ParseError):
        decode_list_response(data)


@given(st.binary(max_size=200))
def test_any_bytes_decode_or_raise_parse_error(data: bytes) -> None:
    with contextlib.suppress(ParseError):
        decode_list_response(data)


# --- the source against a real gRPC server ---------------------------------------------------------------


class Kubelet:
    """A gRPC server on a unix socket that serves v1.PodResourcesLister/List like the kubelet."""

    def __init__(self, socket: Path, reply: Callable[[], bytes]) -> None:
        self.socket = socket
        self.reply = reply
        self.calls = 0
        handler = grpc.method_handlers_generic_handler(
            "v1.PodResourcesLister",
            {
                "List": grpc.unary_unary_rpc_method_handler(
                    self._list, request_deserializer=lambda b: b, response_serializer=lambda b: b
                )
            },
        )
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=[handler])
        self.server.add_insecure_port(f"unix:{socket}")

    def _list(self, request: bytes, _context: grpc.ServicerContext) -> bytes:
        assert request == b""  # ListPodResourcesRequest has no fields
        self.calls += 1
        return self.reply()


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[Kubelet]:
    served = Kubelet(tmp_path / "kubelet.sock", lambda: GOLDEN)
    served.server.start()
    try:
        yield served
    finally:
        served.server.stop(grace=None)


def source_for(socket: Path, timeout: float = 2.0) -> PodResourcesSource:
    return PodResourcesSource(Config(kubernetes_socket=socket, kubernetes_timeout_seconds=timeout))


def test_source_lists_pod_resources_from_a_real_grpc_server(kubelet: Kubelet) -> None:
    kubelet.reply = lambda: GOLDEN + pod("default", "infer", {"srv": [("amd.com/cpx_nps4", ["amdgpu_xcp.9"])]})
    source = source_for(kubelet.socket)
    try:
        snap = source.collect()
        again = source.collect()  # the channel is kept between runs
    finally:
        source.close()
    assert snap == again
    assert [(a.namespace, a.pod, a.container, a.resource_name, a.device_id) for a in snap.allocations] == [
        ("ml", "train-0", "rocm", "amd.com/gpu", "0000:c1:00.0"),
        ("ml", "train-0", "rocm", "amd.com/gpu", "amdgpu_xcp.3"),
        ("default", "infer", "srv", "amd.com/cpx_nps4", "amdgpu_xcp.9"),
    ]
    assert kubelet.calls == 2


def test_no_socket_is_a_source_error_with_health_and_one_log_line(tmp_path: Path) -> None:
    source = source_for(tmp_path / "absent.sock")
    store = SnapshotStore()
    store.register("kubernetes", 15, 47)
    with capture_logs() as logs:
        assert run_source(source, store) is False
        assert run_source(source, store) is False  # the same failure again: debug, not another warning
    source.close()
    entry = store.view(time.time()).entries["kubernetes"]
    assert entry.health.up is False and entry.health.failures_total == 2
    assert "UNAVAILABLE" in (entry.health.last_error or "")
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert [e["event"] for e in warnings] == ["source_failed"]


def test_deadline_and_garbage_reply_are_source_errors(kubelet: Kubelet) -> None:
    release = threading.Event()

    def slow() -> bytes:
        release.wait(5)
        return GOLDEN

    kubelet.reply = slow
    source = source_for(kubelet.socket, timeout=0.2)
    started = time.monotonic()
    with pytest.raises(SourceError, match="DEADLINE_EXCEEDED"):
        source.collect()
    assert time.monotonic() - started < 2
    release.set()
    kubelet.reply = lambda: b"\x0a\x09truncated"
    with pytest.raises(SourceError, match="does not decode"):
        source.collect()
    kubelet.reply = lambda: GOLDEN  # and it recovers on the next run
    assert len(source.collect().allocations) == 2
    source.close()


def test_without_grpcio_the_source_fails_and_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "grpc", None)  # import grpc raises ImportError
    with pytest.raises(SourceError) as failed:
        source_for(tmp_path / "kubelet.sock").collect()
    # Where this exporter is installed and what to run there: no package of the project's name is published.
    message = str(failed.value)
    assert f"not installed in {sys.prefix}" in message, message
    assert f"{sys.executable} -m pip install 'grpcio>=1.60'" in message and "rocm-watchdog[" not in message


def test_the_grpcio_hint_asks_for_what_the_kubernetes_extra_requires() -> None:
    import tomllib

    from exporter.sources.podresources import GRPCIO_REQUIREMENT, grpcio_hint

    extra = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    assert extra["optional-dependencies"]["kubernetes"] == [GRPCIO_REQUIREMENT]
    hint = grpcio_hint("/opt/rocm-watchdog/bin/python", "/opt/rocm-watchdog")
    assert hint.endswith(
        "install it there with /opt/rocm-watchdog/bin/python -m pip install 'grpcio>=1.60' "
        "(the kubernetes extra; the image has it)"
    )


def test_the_source_is_opt_in() -> None:
    assert not Config().enabled("kubernetes")
    assert "kubernetes" not in [job.source.name for job in build_jobs(Config(), SnapshotStore())]
    on = Config(collectors={"kubernetes": True})
    assert [(j.source.name, j.interval_seconds, j.timeout_seconds) for j in build_jobs(on, SnapshotStore())] == [
        ("kubernetes", 15.0, 2.0)
    ]


# --- the join: GPU -> container, KFD process -> GPU -> container ------------------------------------------

POD_UID = "0b9a6c8e-3f5d-4c1a-9e2b-7d4f6a8c0e12"
IN_POD = f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_UID.replace('-', '_')}.slice/x\n"


def test_pod_namespace_and_container_join_a_gpu_process(tmp_path: Path, kubelet: Kubelet) -> None:
    root = build_root(
        tmp_path,
        [
            FakeGpu("0000:c1:00.0", card=1, render=128, kfd_node=1, gpu_id=11111),
            FakeGpu(
                "0000:c2:00.0",
                card=2,
                render=129,
                kfd_node=2,
                gpu_id=22222,
                compute_partition="DPX",
                partitions=(FakeXcp(xcp=3, index=1, card=3, render=130, kfd_node=3, gpu_id=33333),),
            ),
        ],
    )
    # pid 4242 in container rocm: its cgroup allows the two devices the kubelet gave it, so KFD lists exactly
    # those two gpu_ids; it holds VRAM on the first.
    kfd_process(root.sys, 4242, {11111: "1073741824\n", 33333: "0\n"})
    host_process(root.proc, 4242, "python3", IN_POD)
    # pid 5151 in another pod, on a GPU the kubelet gave nobody: no attribution from a GPU without an owner
    kfd_process(root.sys, 5151, {22222: "4096\n"})
    host_process(root.proc, 5151, "other", IN_POD)
    # pid 6161 on the host (not in any pod) using the pod's GPU: not the pod's process
    kfd_process(root.sys, 6161, {11111: "8192\n"})
    host_process(root.proc, 6161, "hostproc", "0::/user.slice/user-0.slice/session-1.scope\n")

    config = root.config(
        collectors={"sysfs": True, "processes": True, "kubernetes": True}, kubernetes_socket=kubelet.socket
    )
    store = SnapshotStore()
    pods = PodResourcesSource(config)
    sources: list[Source[object]] = [SysfsSource(config), ProcessesSource(config, list), pods]
    for source in sources:
        store.register(source.name, 15, 60)
        assert run_source(source, store), store.view(time.time()).entries[source.name].health.last_error
    pods.close()
    registry = make_registry(store, config)

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    # the device plugin's ids: a PCI address, and a partition's platform device name
    gpu_pod = dict(zip(("namespace", "pod", "container"), ROCM, strict=True))
    assert value("rocm_gpu_pod_info", pci_bus="0000:c1:00.0", **gpu_pod) == 1
    assert value("rocm_gpu_pod_info", pci_bus="0000:c2:00.1", **gpu_pod) == 1
    assert value("rocm_process_pod_info", pid="4242", **gpu_pod) == 1
    assert value("rocm_process_gpu_vram_used_bytes", pid="4242", pci_bus="0000:c1:00.0") == 1 << 30
    assert value("rocm_process_gpu_vram_used_bytes", pid="4242", pci_bus="0000:c2:00.1") is None  # 0 bytes there
    assert value("rocm_process_gpu_vram_used_bytes", pid="5151", pci_bus="0000:c2:00.0") == 4096
    # the per-process series keep their labels; attribution is only in the info series
    assert value("rocm_process_vram_used_bytes", pid="4242", process_name="python3") == 1 << 30
    text = "\n".join(
        f"{s.name}{s.labels}" for m in registry.collect() for s in m.samples if s.name == "rocm_process_pod_info"
    )
    assert "5151" not in text and "6161" not in text
    assert value("rocm_watchdog_source_up", source="kubernetes") == 1


def test_a_process_on_gpus_of_two_containers_is_not_attributed() -> None:
    allocations = [
        DeviceAllocation("ns", "a", "c", "amd.com/gpu", "0000:03:00.0"),
        DeviceAllocation("ns", "b", "c", "amd.com/gpu", "0000:04:00.0"),
        DeviceAllocation("ns", "nic", "c", "amd.com/nic", "0000:05:00.0"),  # a NIC's PCI address: not a GPU here
        DeviceAllocation("ns", "x", "c", "example.com/gpu", "0000:03:00.0"),  # not the AMD device plugin
        DeviceAllocation("ns", "gone", "c", "amd.com/gpu", "0000:09:00.0"),  # not a GPU of this host now
    ]
    owners = gpu_owners(allocations, {"0000:03:00.0", "0000:04:00.0"}, {})
    assert owners == {"0000:03:00.0": {("ns", "a", "c")}, "0000:04:00.0": {("ns", "b", "c")}}
    both = ProcessInfo(pid=1, gpus=(ProcessGpu("0000:03:00.0", 0), ProcessGpu("0000:04:00.0", 0)))
    assert process_owner(both, owners) is None
    # VRAM on one of them decides
    busy = ProcessInfo(pid=2, gpus=(ProcessGpu("0000:03:00.0", 5), ProcessGpu("0000:04:00.0", 0)))
    assert process_owner(busy, owners) == ("ns", "a", "c")
    # a cgroup that could not be read does not rule a process out; one that shows no pod does
    assert process_owner(ProcessInfo(pid=3, gpus=(ProcessGpu("0000:04:00.0", 1),)), owners) == ("ns", "b", "c")
    host = ProcessInfo(pid=4, gpus=(ProcessGpu("0000:04:00.0", 1),), cgroup_known=True)
    assert process_owner(host, owners) is None


def test_partition_device_spellings_meet() -> None:
    # the kernel names the platform device amdgpu_xcp.N; k8s-device-plugin globs amdgpu_xcp_*
    owners = gpu_owners(
        [DeviceAllocation("ns", "p", "c", "amd.com/cpx_nps4", "amdgpu_xcp_3")], set(), {"amdgpu_xcp.3": "0000:c2:00.1"}
    )
    assert owners == {"0000:c2:00.1": {("ns", "p", "c")}}
