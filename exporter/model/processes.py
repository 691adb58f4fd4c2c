"""KFD processes enriched with what the host knows about them (never their command line or environment)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    pid: int
    name: str | None = None  # the kernel's comm, or the tool's name when the process is gone
    user: str | None = None  # host user name, or the numeric uid when it has no name
    container_id: str | None = None
    pod_uid: str | None = None
    vram_used_bytes: int | None = None
    gpu_ids: tuple[int, ...] = ()  # KFD gpu_id of every GPU the process has opened


@dataclass(frozen=True, slots=True)
class ProcessSnapshot:
    processes: tuple[ProcessInfo, ...] = ()
