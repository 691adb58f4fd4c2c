"""``amd-smi --help`` and ``amd-smi <command> --help`` (argparse output: a ``usage: amd-smi`` line, a
``Commands:`` list at the top level, the options of a subcommand), and the amd-smi argument lists to run that
follow from them (``research/smi-formats.md`` section 3 for why ``metric`` and ``static`` are narrowed).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import msgspec

from exporter.model import ParseError


class AmdSmiHelp(msgspec.Struct, frozen=True):
    """What one ``amd-smi [command] --help`` says the installed version offers.

    ``command`` is None for the top-level help (``amd-smi --help`` or plain ``amd-smi``), else the
    subcommand (``"metric"``). ``commands`` are the subcommands the top-level help lists, aliases included
    (``"ucode"``, ``"dmon"``). ``options`` are every option spelling listed (``"-m"``, ``"--mem-usage"``).
    """

    command: str | None
    version: str | None = None
    rocm_version: str | None = None
    commands: frozenset[str] = frozenset()
    options: frozenset[str] = frozenset()

    def supports(self, *options: str) -> bool:
        """True when any of ``options`` is listed (``supports("--mem-usage", "-m")``)."""
        return any(option in self.options for option in options)


_USAGE = re.compile(r"^usage:\s*amd-smi(?:\s+(?P<command>[a-z][a-z0-9-]*))?", re.IGNORECASE)
_VERSION = re.compile(r"\bVersion:\s*(?P<version>[^\s|]+)")
_ROCM_VERSION = re.compile(r"\bROCm version:\s*(?P<version>[^\s|]+)", re.IGNORECASE)
_COMMAND_LINE = re.compile(r"^\s+(?P<name>[a-z][a-z0-9-]*)(?:\s+\((?P<alias>[a-z][a-z0-9-]*)\))?(?:\s{2,}\S.*)?$")
_OPTION = re.compile(r"(?<![\w-])(--?[A-Za-z0-9][\w-]*)")


def parse_amd_smi_help(text: str) -> AmdSmiHelp:
    """Parse ``amd-smi --help`` (or ``amd-smi <command> --help``). Raises :class:`ParseError` without an
    ``usage: amd-smi`` line."""
    lines = text.splitlines()
    command: str | None = None
    usage_at: int | None = None
    for number, line in enumerate(lines):
        m = _USAGE.match(line.strip())
        if m:
            command = m["command"]
            usage_at = number
            break
    if usage_at is None:
        raise ParseError("not amd-smi help: no 'usage: amd-smi' line", 1 if lines else None)

    version = rocm = None
    for line in lines:
        if version is None and (m := _VERSION.search(line)) and not line.lstrip().lower().startswith("rocm"):
            version = m["version"]
        if rocm is None and (m := _ROCM_VERSION.search(line)):
            rocm = m["version"]

    options: set[str] = set()
    commands: set[str] = set()
    in_usage = True
    in_commands = False
    for line in lines[usage_at:]:
        stripped = line.strip()
        if in_usage:
            options.update(re.findall(r"\[(--?[A-Za-z0-9][\w-]*)", line))
            options.update(re.findall(r"\|\s*(--?[A-Za-z0-9][\w-]*)", line))
            if not stripped:
                in_usage = False
            continue
        if stripped.endswith("Commands:") and command is None:
            in_commands = True
            continue
        if in_commands:
            if not stripped:
                in_commands = False
                continue
            cm = _COMMAND_LINE.match(line)
            if cm and not stripped.endswith(":"):
                commands.add(cm["name"])
                if cm["alias"]:
                    commands.add(cm["alias"])
            continue
        if stripped.startswith("-"):
            spec = re.split(r"\s{2,}", stripped, maxsplit=1)[0]
            options.update(token for token in _OPTION.findall(spec) if not token[1:].isdigit())
    return AmdSmiHelp(
        command=command,
        version=version,
        rocm_version=rocm,
        commands=frozenset(commands),
        options=frozenset(options),
    )


def amd_smi_commands(helps: Iterable[AmdSmiHelp]) -> tuple[tuple[str, ...], ...]:
    """The amd-smi argument lists to run, from the help texts probed at start.

    ``helps`` holds the top-level help and the help of ``list``, ``metric``, ``process``, ``topology`` and
    ``static`` when probed. A subcommand is used when the top-level help lists it (or, without a top-level
    help, when its own help was probed); ``--json`` when its help lists it. ``metric`` is asked only for
    memory (``--mem-usage``, or ``-m``), and ``static`` only for ``--numa``/``--bus``/``--asic`` when listed:
    without those flags both would print everything, which is slow (research section 3).
    """
    by_command: dict[str | None, AmdSmiHelp] = {}
    for help_ in helps:
        by_command.setdefault(help_.command, help_)
    top = by_command.get(None)
    result: list[tuple[str, ...]] = []
    for command in ("list", "metric", "process", "topology", "static"):
        sub = by_command.get(command)
        if top is not None and command not in top.commands:
            continue
        if top is None and sub is None:
            continue
        args: list[str] = [command]
        if command == "metric":
            if sub is None:
                continue
            flag = next((f for f in ("--mem-usage", "-m") if sub.supports(f)), None)
            if flag is None:
                continue
            args.append(flag)
        elif command == "static":
            if sub is None:
                continue
            flags = [
                next(f for f in pair if sub.supports(f))
                for pair in (("--numa", "-u"), ("--bus", "-b"), ("--asic", "-a"))
                if sub.supports(*pair)
            ]
            if not flags:
                continue
            args.extend(flags)
        if sub is None or sub.supports("--json"):
            args.append("--json")
        result.append(tuple(args))
    return tuple(result)
