"""The subset of udev's rule language that decides a device node's owner, group and mode. Pure: text in, verdicts
out; the files are gathered by ``exporter.sources.hostconfig`` and nothing here runs a program.

What is modelled (udev(7), systemd's udev-rules.c):

- the files of ``/etc/udev/rules.d``, ``/run/udev/rules.d``, ``/usr/lib/udev/rules.d`` and ``/lib/udev/rules.d``
  are read as one list sorted by file name; a file in an earlier directory masks a same-named one in a later
  directory, and a symlink to ``/dev/null`` masks the name entirely (``order_files``);
- a rule is one line (``\\`` continues it) of comma-separated ``KEY[{attr}] OP "value"`` pairs; it applies when
  every match key holds; ``==`` / ``!=`` compare with shell globs and ``|`` alternatives;
- matches on the event: ``ACTION`` (``add``, what a boot or ``udevadm trigger`` replays), ``SUBSYSTEM``,
  ``KERNEL``, ``DRIVER``, ``DEVPATH``, ``ATTR{x}``; on the device or one of its sysfs parents, all on the same
  one: ``SUBSYSTEMS``, ``KERNELS``, ``DRIVERS``, ``ATTRS{x}``;
- ``OWNER``, ``GROUP`` and ``MODE`` assigned with ``=`` (or ``+=``, the same for a single value) and ``:=``, which
  makes the value final: later assignments are ignored;
- ``GOTO="x"`` skips forward to ``LABEL="x"`` in the same file (udev ignores a GOTO without its label).

A rule whose match depends on what cannot be known from files (``PROGRAM``, ``RESULT``, ``IMPORT``, ``ENV``,
``TEST``, ``TAG``, ``NAME``, ``SYMLINK``, ``CONST``, ``SYSCTL``) is undecidable: when it would set the owner,
group or mode or jump, it is reported with its file and line, never guessed. The verdict is then what the rules
give when such a rule does not apply.

Without any rule, devtmpfs's ``root:root 0600`` stands; a GROUP without a MODE gives ``0660`` (udev-node.c).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence

import msgspec

from exporter.model import ParseError

RULES_DIRS = ("/etc/udev/rules.d", "/run/udev/rules.d", "/usr/lib/udev/rules.d", "/lib/udev/rules.d")
DEVTMPFS_MODE = 0o600

# Match keys decided from the event and the device's sysfs chain.
_EVENT_KEYS = frozenset({"ACTION", "SUBSYSTEM", "KERNEL", "DRIVER", "DEVPATH", "ATTR"})
_PARENT_KEYS = frozenset({"SUBSYSTEMS", "KERNELS", "DRIVERS", "ATTRS"})
# Match keys whose outcome depends on programs, the udev database or the environment.
_UNDECIDABLE_KEYS = frozenset(
    {"PROGRAM", "RESULT", "IMPORT", "ENV", "TEST", "TAG", "TAGS", "NAME", "SYMLINK", "CONST", "SYSCTL", "SECLABEL"}
)
# Keys that run something or read the udev database: the rule stops when they fail, with any operator.
_RUN_KEYS = frozenset({"PROGRAM", "IMPORT"})
_ASSIGN_OPS = frozenset({"=", "+=", "-=", ":="})
_PAIR = re.compile(
    r"\s*(?P<key>[A-Z_]+)(?:\{(?P<attr>[^}]*)\})?\s*(?P<op>==|!=|\+=|-=|:=|=)\s*\"(?P<value>(?:[^\"\\]|\\.)*)\"\s*"
)


class RulePair(msgspec.Struct, frozen=True):
    key: str
    attr: str | None
    op: str
    value: str


class Rule(msgspec.Struct, frozen=True):
    file: str  # the path as the host names it: "/etc/udev/rules.d/70-kfd.rules"
    line: int  # 1-based, the rule's first line
    pairs: tuple[RulePair, ...]

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


class RulesFile(msgspec.Struct, frozen=True):
    path: str  # host path
    rules: tuple[Rule, ...]
    errors: tuple[str, ...] = ()  # lines udev would skip ("file:line: why")


class SysfsDevice(msgspec.Struct, frozen=True):
    """One device of a node's sysfs chain: the node's own device first, then its parents."""

    kernel: str  # "renderD128", "0000:03:00.0"
    subsystem: str | None  # "drm", "pci"
    driver: str | None = None  # "amdgpu"
    devpath: str = ""  # under /sys, without it: "/devices/pci0000:00/.../drm/renderD128"
    attrs: tuple[tuple[str, str], ...] = ()  # the attribute files the rules ask for, as read (stripped)

    def attr(self, name: str) -> str | None:
        for k, v in self.attrs:
            if k == name:
                return v
        return None


class NodeVerdict(msgspec.Struct, frozen=True):
    """What udev would give one node, and where each value comes from (None: no rule set it)."""

    owner: str  # "root", or what a rule names
    group: str  # "root", or what a rule names
    mode: int
    owner_from: str | None = None  # "file:line"
    group_from: str | None = None
    mode_from: str | None = None
    undecidable: tuple[str, ...] = ()  # "file:line (PROGRAM)" of rules that might change the outcome

    @property
    def set_by_rules(self) -> bool:
        return any(x is not None for x in (self.owner_from, self.group_from, self.mode_from))


def _logical_lines(text: str) -> Iterable[tuple[int, str]]:
    """(first line number, text) of each rule line, continuations joined."""
    start, parts = 0, list[str]()
    for number, raw in enumerate(text.splitlines(), start=1):
        if not parts:
            start = number
        line = raw.rstrip()
        if line.endswith("\\"):
            parts.append(line[:-1])
            continue
        parts.append(line)
        yield start, " ".join(parts)
        parts = []
    if parts:
        yield start, " ".join(parts)


def parse_rules(text: str, path: str) -> RulesFile:
    """Every rule of one file. A line udev would reject is skipped and named in ``errors``, as udev logs it."""
    rules: list[Rule] = []
    errors: list[str] = []
    for number, line in _logical_lines(text):
        body = line.strip()
        if not body or body.startswith("#"):
            continue
        try:
            rules.append(Rule(path, number, tuple(_parse_pairs(body, number))))
        except ParseError as e:
            errors.append(f"{path}:{number}: {e.message}")
    return RulesFile(path, tuple(rules), tuple(errors))


def _parse_pairs(body: str, number: int) -> list[RulePair]:
    pairs: list[RulePair] = []
    pos = 0
    while pos < len(body):
        m = _PAIR.match(body, pos)
        if m is None:
            raise ParseError(f"cannot parse the rule at {body[pos : pos + 30]!r}", line=number)
        value = m.group("value").replace('\\"', '"')
        pairs.append(RulePair(m.group("key"), m.group("attr"), m.group("op"), value))
        pos = m.end()
        if pos < len(body):
            if body[pos] != ",":
                raise ParseError(f"expected ',' at {body[pos : pos + 30]!r}", line=number)
            pos += 1
    if not pairs:
        raise ParseError("empty rule", line=number)
    return pairs


def order_files(found: Mapping[str, Sequence[tuple[str, bool]]]) -> tuple[list[str], list[str]]:
    """Which files udev reads, in order: ``found`` maps each rules directory (host path, in RULES_DIRS' order of
    precedence) to its ``(file name, masked)`` entries, ``masked`` for a symlink to /dev/null. Returns the host
    paths read, sorted by file name, and the names masked."""
    chosen: dict[str, str | None] = {}
    for directory in RULES_DIRS:
        for name, masked in found.get(directory, ()):
            if not name.endswith(".rules") or name in chosen:
                continue
            chosen[name] = None if masked else f"{directory}/{name}"
    paths = [p for _, p in sorted(chosen.items()) if p is not None]
    return paths, sorted(n for n, p in chosen.items() if p is None)


def attrs_wanted(files: Iterable[RulesFile]) -> frozenset[str]:
    """The sysfs attribute names the rules match on (ATTR{x}, ATTRS{x}): what the source reads for each device."""
    return frozenset(p.attr for f in files for r in f.rules for p in r.pairs if p.key in ("ATTR", "ATTRS") and p.attr)


def _glob(value: str | None, pattern: str) -> bool:
    if value is None:
        return False
    return any(fnmatch.fnmatchcase(value, alt) for alt in pattern.split("|"))


def _holds(pair: RulePair, actual: str | None) -> bool:
    hit = _glob(actual, pair.value)
    return hit if pair.op == "==" else not hit


def _event_value(pair: RulePair, device: SysfsDevice, action: str) -> str | None:
    if pair.key == "ACTION":
        return action
    if pair.key == "SUBSYSTEM":
        return device.subsystem
    if pair.key == "KERNEL":
        return device.kernel
    if pair.key == "DRIVER":
        return device.driver
    if pair.key == "DEVPATH":
        return device.devpath
    return device.attr(pair.attr or "")


def _parent_value(pair: RulePair, device: SysfsDevice) -> str | None:
    if pair.key == "SUBSYSTEMS":
        return device.subsystem
    if pair.key == "KERNELS":
        return device.kernel
    if pair.key == "DRIVERS":
        return device.driver
    return device.attr(pair.attr or "")


def _matches(rule: Rule, chain: Sequence[SysfsDevice], action: str) -> tuple[bool, str | None]:
    """(the decidable matches hold, the first undecidable key or None)."""
    undecidable: str | None = None
    parent_pairs: list[RulePair] = []
    for pair in rule.pairs:
        if pair.key in _RUN_KEYS and undecidable is None:
            undecidable = pair.key  # PROGRAM="..." and IMPORT{...}="..." are conditions whatever their operator
            continue
        if pair.op not in ("==", "!="):
            continue
        if pair.key in _EVENT_KEYS:
            if not _holds(pair, _event_value(pair, chain[0], action)):
                return False, None
        elif pair.key in _PARENT_KEYS:
            parent_pairs.append(pair)
        elif undecidable is None:
            undecidable = pair.key if pair.key in _UNDECIDABLE_KEYS else f"{pair.key} (not modelled)"
    if parent_pairs and not any(all(_holds(p, _parent_value(p, d)) for p in parent_pairs) for d in chain):
        return False, None
    return True, undecidable


def evaluate_node(files: Sequence[RulesFile], chain: Sequence[SysfsDevice], action: str = "add") -> NodeVerdict:
    """What the rules give the node whose device chain is ``chain`` (its own device first)."""
    values: dict[str, tuple[str, str]] = {}  # key -> (value, file:line)
    final: set[str] = set()
    undecidable: list[str] = []
    for f in files:
        skip_to: str | None = None
        for rule in f.rules:
            if skip_to is not None:
                if any(p.key == "LABEL" and p.value == skip_to for p in rule.pairs):
                    skip_to = None
                else:
                    continue
            assigns = [p for p in rule.pairs if p.key in ("OWNER", "GROUP", "MODE") and p.op in _ASSIGN_OPS]
            goto = next((p.value for p in rule.pairs if p.key == "GOTO"), None)
            ok, unknown = _matches(rule, chain, action)
            if not ok:
                continue
            if unknown is not None:
                if assigns or goto is not None:
                    undecidable.append(f"{rule.where} ({unknown})")
                continue
            for p in assigns:
                if p.key in final or p.op == "-=":
                    continue
                values[p.key] = (p.value, rule.where)
                if p.op == ":=":
                    final.add(p.key)
            if goto is not None and any(p.key == "LABEL" and p.value == goto for r in f.rules for p in r.pairs):
                skip_to = goto
    owner = values.get("OWNER")
    group = values.get("GROUP")
    mode = values.get("MODE")
    mode_value = _mode(mode[0]) if mode is not None else None
    if mode_value is None:
        mode = None
        mode_value = 0o660 if group is not None else DEVTMPFS_MODE
    return NodeVerdict(
        owner=owner[0] if owner else "root",
        group=group[0] if group else "root",
        mode=mode_value,
        owner_from=owner[1] if owner else None,
        group_from=group[1] if group else None,
        mode_from=mode[1] if mode else None,
        undecidable=tuple(undecidable),
    )


def _mode(text: str) -> int | None:
    try:
        value = int(text, 8)
    except ValueError:
        return None
    return value if 0 <= value <= 0o7777 else None
