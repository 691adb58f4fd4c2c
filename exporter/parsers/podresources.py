"""Pure decoder of the kubelet pod-resources ``List`` reply (protobuf wire format), and nothing else.

The few messages read, with the field numbers of kubernetes ``staging/src/k8s.io/kubelet/pkg/apis/podresources/v1/
api.proto`` (package ``v1``, service ``PodResourcesLister``)::

    message ListPodResourcesResponse { repeated PodResources pod_resources = 1; }
    message PodResources { string name = 1; string namespace = 2; repeated ContainerResources containers = 3; }
    message ContainerResources { string name = 1; repeated ContainerDevices devices = 2; repeated int64 cpu_ids = 3;
                                 repeated ContainerMemory memory = 4; repeated DynamicResource dynamic_resources = 5; }
    message ContainerDevices { string resource_name = 1; repeated string device_ids = 2; TopologyInfo topology = 3; }

Written by hand instead of generated: five string/message fields do not justify a protobuf runtime. Every other
field (CPU ids, memory, topology, DRA claims, anything a later kubelet adds) is skipped by its wire type, as
protobuf parsers do, and so is a known field sent with an unexpected wire type. A message cut short, a length
past the end or a varint longer than ten bytes is a ``ParseError``.
"""

from __future__ import annotations

from collections.abc import Iterator

from exporter.model import ParseError
from exporter.model.processes import DeviceAllocation

# Wire types (protobuf encoding spec).
VARINT, I64, LEN, SGROUP, EGROUP, I32 = 0, 1, 2, 3, 4, 5

# Field numbers, api.proto v1.
_RESPONSE_POD_RESOURCES = 1
_POD_NAME, _POD_NAMESPACE, _POD_CONTAINERS = 1, 2, 3
_CONTAINER_NAME, _CONTAINER_DEVICES = 1, 2
_DEVICES_RESOURCE_NAME, _DEVICES_IDS = 1, 2

_MAX_GROUP_DEPTH = 32  # groups are proto2-only; a reply nesting them deeper is garbage, not a kubelet


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` -> (value, position after it)."""
    value = 0
    for i in range(10):
        if pos >= len(data):
            raise ParseError(f"truncated varint at byte {pos}")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return value, pos
    raise ParseError(f"varint longer than 10 bytes before byte {pos}")


def _skip(data: bytes, pos: int, wire_type: int, field: int, depth: int = 0) -> int:
    """The position after the value of an unknown field whose tag ended at ``pos``."""
    if wire_type == VARINT:
        return _varint(data, pos)[1]
    if wire_type in (I64, I32):
        end = pos + (8 if wire_type == I64 else 4)
    elif wire_type == LEN:
        length, pos = _varint(data, pos)
        end = pos + length
    elif wire_type == SGROUP:
        if depth >= _MAX_GROUP_DEPTH:
            raise ParseError(f"groups nested deeper than {_MAX_GROUP_DEPTH} at byte {pos}")
        while True:
            tag, pos = _varint(data, pos)
            inner_field, inner_type = tag >> 3, tag & 7
            if inner_type == EGROUP:
                if inner_field != field:
                    raise ParseError(f"group {field} closed by end-group {inner_field} at byte {pos}")
                return pos
            pos = _skip(data, pos, inner_type, inner_field, depth + 1)
    else:
        raise ParseError(f"field {field}: invalid wire type {wire_type} at byte {pos}")
    if end > len(data):
        raise ParseError(f"field {field}: {end - pos} bytes announced, {len(data) - pos} left at byte {pos}")
    return end


def _fields(data: bytes) -> Iterator[tuple[int, int, bytes | int]]:
    """(field number, wire type, value) of every field of one message: bytes for LEN fields, the integer for
    VARINT fields; other wire types are skipped and yield nothing."""
    pos = 0
    while pos < len(data):
        tag, pos = _varint(data, pos)
        field, wire_type = tag >> 3, tag & 7
        if field == 0:
            raise ParseError(f"field number 0 at byte {pos}")
        if wire_type == LEN:
            length, start = _varint(data, pos)
            pos = start + length
            if pos > len(data):
                raise ParseError(f"field {field}: {length} bytes announced, {len(data) - start} left")
            yield field, wire_type, data[start:pos]
        elif wire_type == VARINT:
            value, pos = _varint(data, pos)
            yield field, wire_type, value
        elif wire_type == EGROUP:
            raise ParseError(f"end-group {field} without a start at byte {pos}")
        else:
            pos = _skip(data, pos, wire_type, field)


def _text(value: bytes) -> str:
    # proto3 strings are UTF-8; a kubelet never sends anything else, and a bad byte must not drop a whole pod
    return value.decode("utf-8", errors="replace")


def _container_devices(data: bytes) -> tuple[str, list[str]]:
    resource = ""
    ids: list[str] = []
    for field, wire_type, value in _fields(data):
        if wire_type != LEN or not isinstance(value, bytes):
            continue  # a known field with another wire type is an unknown field
        if field == _DEVICES_RESOURCE_NAME:
            resource = _text(value)
        elif field == _DEVICES_IDS:
            ids.append(_text(value))
    return resource, ids


def _container(data: bytes) -> tuple[str, list[tuple[str, list[str]]]]:
    name = ""
    devices: list[tuple[str, list[str]]] = []
    for field, wire_type, value in _fields(data):
        if wire_type != LEN or not isinstance(value, bytes):
            continue
        if field == _CONTAINER_NAME:
            name = _text(value)
        elif field == _CONTAINER_DEVICES:
            devices.append(_container_devices(value))
    return name, devices


def _pod(data: bytes) -> Iterator[DeviceAllocation]:
    name = namespace = ""
    containers: list[tuple[str, list[tuple[str, list[str]]]]] = []
    for field, wire_type, value in _fields(data):
        if wire_type != LEN or not isinstance(value, bytes):
            continue
        if field == _POD_NAME:
            name = _text(value)
        elif field == _POD_NAMESPACE:
            namespace = _text(value)
        elif field == _POD_CONTAINERS:
            containers.append(_container(value))
    for container, devices in containers:
        for resource, ids in devices:
            for device_id in ids:
                yield DeviceAllocation(namespace, name, container, resource, device_id)


def decode_list_response(data: bytes) -> tuple[DeviceAllocation, ...]:
    """A serialised ``ListPodResourcesResponse`` -> one record per (pod, container, device id).

    Pods and containers without devices leave nothing: they hold no GPU.
    """
    out: list[DeviceAllocation] = []
    for field, wire_type, value in _fields(bytes(data)):
        if field == _RESPONSE_POD_RESOURCES and wire_type == LEN and isinstance(value, bytes):
            out.extend(_pod(value))
    return tuple(out)
