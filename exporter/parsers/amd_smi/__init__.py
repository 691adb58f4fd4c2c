"""Pure parser for ``amd-smi`` output: ``list``, ``metric --mem-usage``, ``process``, ``topology`` and
``static --numa/--bus/--asic``, in JSON or human-readable text, any ROCm version seen (6.0 .. 7.x).

Formats (``research/smi-formats.md`` section 2, and the captures in ``fixtures/smi/amd-smi``), one module each:

- ``json_docs``: a list of per-GPU objects ``{"gpu": N, ...}`` (pretty or one-line), or the same list under a
  top-level ``gpu_data`` key (amd-smi >= 26). Numbers are plain or ``{"value": N, "unit": "..."}``.
- ``text_blocks``: YAML-like blocks, ``GPU: N`` at column 0 then indented ``KEY: value`` / ``KEY:`` sub-blocks;
  ``topology_tables``: for ``topology`` (ROCm >= 6.1) ``<NAME> TABLE:`` matrices whose rows and columns are
  BDFs, plus a Legend; ``monitor_tables``: the tables of ``amd-smi monitor`` and ``monitor --process``
  (``-q`` too); ``partition_tables``: the ``GPU_ID``-keyed tables of ``amd-smi partition`` (ROCm >= 6.4), with
  blank, ``N/A`` and comma-list cells and star-framed warning boxes.
- ``default_view``: the default view of plain ``amd-smi`` (amd-smi >= 26, ROCm 7): box-drawn tables, a two-line
  entry per GPU (BDF and name; index and ``used/total MB``) and a ``Processes:`` box; borders never reach a value.
- Either may be preceded by tool messages (``WARNING: User is missing ...``, ``Fail to open libdrm...``),
  and one capture may hold several outputs one after another.

``gpu_object`` reads one ``{"gpu": N, ...}`` object, from JSON or from a text block; ``common`` holds what
the formats share (values and units: "MB" are MiB, N/A and ``<redacted>`` are None; the report builder);
``parse`` the entry point :func:`parse_amd_smi`, and what counts as amd-smi output when no GPU is named;
``merge`` :func:`merge_amd_smi_reports` (where a text table's positional index gives way to a real one);
``help_text`` the ``--help`` parser and the commands to run.
"""

from __future__ import annotations

from exporter.parsers.amd_smi.help_text import AmdSmiHelp, amd_smi_commands, parse_amd_smi_help
from exporter.parsers.amd_smi.merge import merge_amd_smi_reports
from exporter.parsers.amd_smi.parse import parse_amd_smi

__all__ = [
    "AmdSmiHelp",
    "amd_smi_commands",
    "merge_amd_smi_reports",
    "parse_amd_smi",
    "parse_amd_smi_help",
]
