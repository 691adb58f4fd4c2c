"""amd-smi's human-readable text (``research/smi-formats.md`` section 2.1): YAML-like blocks, ``GPU: N`` at
column 0 then indented ``KEY: value`` / ``KEY:`` sub-blocks (``list``, ``metric``, ``process``, ``static``), read
as nested dicts with lower-case keys for :func:`~exporter.parsers.amd_smi.gpu_object._interpret_gpu`. Blocks
of other device kinds (``CPU: 0``, ``AI_NIC: 0``) are recognised but not read.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from exporter.parsers.amd_smi.common import _Builder, _Multi

# Blocks of other device kinds (``CPU: 0``, ``CORE: 3``, ``AI_NIC: 0`` of amd-smi >= 26, ``SWITCH: 1``): amd-smi
# data, but not about GPUs.
_OTHER_HEADER = re.compile(r"^(?!GPU:)[A-Z][A-Z0-9_]*:\s*\d{1,9}\s*$")
_BLOCK_KEY = re.compile(r"^[ \t]+[A-Z][A-Z0-9_]*:")  # an indented ``KEY:`` line of a text block


def _indent(line: str) -> int:
    expanded = line.expandtabs(4)
    return len(expanded) - len(expanded.lstrip(" "))


def _parse_block(lines: Sequence[tuple[int, str]], out: _Builder) -> dict[str, Any]:
    """Indented ``KEY: value`` / ``KEY:`` lines (under a ``GPU: N`` header) as nested dicts, keys lower-case."""
    root: dict[str, Any] = {}
    stack: list[tuple[int, dict[str, Any]]] = [(-1, root)]
    open_value: tuple[dict[str, Any], str] | None = None
    for number, line in lines:
        content = line.strip()
        if not content:
            continue
        indent = _indent(line)
        if open_value is not None:  # a ``[a, b,`` list the YAML dump folded over several lines
            node_, key_ = open_value
            node_[key_] = f"{node_[key_]} {content}"
            if "]" in content:
                open_value = None
            continue
        key, sep, value = content.partition(":")
        key = key.strip().lower()
        if not sep or not key:
            out.warn(f"line {number}: cannot place: {content}")
            continue
        while len(stack) > 1 and indent <= stack[-1][0]:
            stack.pop()
        node = stack[-1][1]
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        child: object = value or {}
        if key in node:
            existing = node[key]
            if not isinstance(existing, _Multi):
                existing = _Multi([existing])
                node[key] = existing
            existing.append(child)
        else:
            node[key] = child
        if isinstance(child, dict):
            stack.append((indent, child))
        elif (
            isinstance(child, str) and child.startswith("[") and "]" not in child and not isinstance(node[key], _Multi)
        ):
            open_value = (node, key)
    return root


def _block_end(lines: Sequence[str], header: int) -> int:
    """The line after a ``GPU: N`` block: its indented (or blank) lines up to the next column-0 line."""
    end = header + 1
    while end < len(lines) and (not lines[end].strip() or lines[end][:1] in (" ", "\t")):
        end += 1
    return end
