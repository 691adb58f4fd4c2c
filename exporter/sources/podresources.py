"""Kubernetes attribution: which container the kubelet gave each GPU, from its pod-resources API.

``--collector.kubernetes`` (off by default) asks the kubelet's ``PodResourcesLister.List`` (pod-resources v1,
``/var/lib/kubelet/pod-resources/kubelet.sock``, a gRPC unix socket) on the source's own schedule; a scrape
never calls it. The AMD device plugin (ROCm/k8s-device-plugin) advertises a GPU by its PCI address and an
MI300-class partition by the name of its platform device (``amdgpu_xcp.N``); the collector joins those ids to
GPUs, and GPUs to KFD processes (``exporter.metrics.gpu.pod_families``).

grpcio is an optional dependency (the ``kubernetes`` extra, which the image installs; elsewhere
``<venv>/bin/python -m pip install 'grpcio>=1.60'``, as ``grpcio_hint`` says), imported on the first run of
the source, never when it is off. The reply is decoded by ``exporter.parsers.podresources`` (no protobuf
runtime). Every call has a deadline (``--kubernetes.timeout``); a failure (no grpcio, no socket, kubelet down,
deadline, a reply that does not decode) is a ``SourceError``: the health series and one log line say it.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

from exporter.config import Config
from exporter.model import ParseError
from exporter.model.processes import PodResourcesSnapshot
from exporter.parsers.podresources import decode_list_response
from exporter.sources import SourceError

if TYPE_CHECKING:
    import grpc

# The full method name: proto package "v1", service "PodResourcesLister", rpc "List" (api.proto).
LIST_METHOD = "/v1.PodResourcesLister/List"
# A node with hundreds of pods and their CPU ids stays far below this; gRPC's default limit is 4 MiB.
MAX_REPLY_BYTES = 16 << 20


def _empty_request(_request: bytes) -> bytes:
    return b""  # ListPodResourcesRequest has no fields: its encoding is empty


def _raw_reply(data: bytes) -> bytes:
    return data  # decoded after the call, so that a bad reply is a clear SourceError, not a gRPC internal error


GRPCIO_REQUIREMENT = "grpcio>=1.60"  # pyproject.toml's kubernetes extra (a test keeps them equal)


def grpcio_hint(executable: str = sys.executable, prefix: str = sys.prefix) -> str:
    """What to run to get grpcio where this exporter is installed: its own interpreter's pip (the project is
    installed from a checkout or a wheelhouse, not from an index by name)."""
    return (
        f"--collector.kubernetes needs grpcio, which is not installed in {prefix}: install it there with "
        f"{executable} -m pip install '{GRPCIO_REQUIREMENT}' (the kubernetes extra; the image has it)"
    )


def _import_grpc() -> ModuleType:
    try:
        import grpc
    except ImportError as exc:
        raise SourceError(f"{grpcio_hint()} ({exc})") from None
    return grpc


class PodResourcesSource:
    name = "kubernetes"

    def __init__(self, config: Config) -> None:
        self._socket = config.kubernetes_socket
        self._timeout = config.kubernetes_timeout_seconds
        self._channel: grpc.Channel | None = None
        self._list: Any = None

    def collect(self) -> PodResourcesSnapshot:
        grpc = _import_grpc()
        if self._list is None:
            # "unix:" + a path: absolute paths give unix:/..., relative ones stay relative to the working directory
            self._channel = grpc.insecure_channel(
                f"unix:{self._socket}", options=[("grpc.max_receive_message_length", MAX_REPLY_BYTES)]
            )
            self._list = self._channel.unary_unary(
                LIST_METHOD, request_serializer=_empty_request, response_deserializer=_raw_reply
            )
        try:
            reply = self._list(b"", timeout=self._timeout)
        except grpc.RpcError as exc:
            # A fresh channel next time: a failed one backs off reconnecting for up to minutes after the kubelet
            # is back, and every call would fail at once until then.
            self.close()
            code = exc.code() if callable(getattr(exc, "code", None)) else None
            details = exc.details() if callable(getattr(exc, "details", None)) else None
            what = code.name if code is not None else type(exc).__name__
            raise SourceError(f"pod-resources List on {self._socket}: {what}: {details or 'no details'}") from None
        try:
            return PodResourcesSnapshot(decode_list_response(reply))
        except ParseError as exc:
            raise SourceError(f"pod-resources List reply from {self._socket} does not decode: {exc}") from None

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
        self._channel = None
        self._list = None
