"""Kernel-log classification rules: loaded from YAML (shipped in ``exporter/data`` or given by the user) and
compiled once. An invalid file raises one ``KernelRulesError`` whose message lists every problem.

Compiling also lays every pattern out in the order the classifier tries them (``slots``) and builds the
prefilter: each pattern's required literals, derived from the regex or declared by its rule (``literals``,
accepted only when the loader can prove every match of every pattern of the rule contains one of them).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Literal

import yaml

from exporter.model.kernel import KERNEL_CLASSES
from exporter.parsers.kernel_log import LineScanner
from exporter.watchdog.kernel_literals import (
    Literals,
    Prefilter,
    declared_literals_cover,
    required_literals,
)
from exporter.watchdog.kernel_literals import required_literal as required_literal  # the analysis lives there

SEVERITIES = ("critical", "warning", "info")
ATTRIBUTIONS = ("device", "aer_source")
_RULE_KEYS = frozenset(
    {
        "class",
        "severity",
        "anchors",
        "details",
        "followups",
        "followup_seconds",
        "drivers",
        "count_group",
        "attribution",
        "lookahead",
        "literals",
    }
)
_CLASS_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
SHIPPED_RULES = "kernel_log_rules.yml"


class KernelRulesError(ValueError):
    """The rules file cannot be used. The message names the file and every problem found."""


@dataclass(frozen=True, slots=True)
class KernelRule:
    event_class: str
    severity: str
    anchors: tuple[re.Pattern[str], ...]
    details: tuple[re.Pattern[str], ...] = ()
    followups: tuple[re.Pattern[str], ...] = ()
    followup_seconds: float = 2.0
    drivers: frozenset[str] = frozenset({"amdgpu"})
    count_group: str | None = None
    attribution: str = "device"
    lookahead_class: str | None = None
    lookahead_seconds: float = 1.0
    literals: tuple[str, ...] = ()  # declared required literals (when the patterns give none), checked at load


SlotKind = Literal["trap", "anchor", "followup", "detail"]


@dataclass(frozen=True, slots=True)
class Slot:
    """One pattern of the rules in the order the classifier tries them: traps, then every rule's anchors, then
    followups, then details (rules in file order within each kind)."""

    kind: SlotKind
    pattern: re.Pattern[str]
    rule: KernelRule | None  # None for a trap
    has_source: bool = False  # the pattern has a (?P<source>...) group (AER)
    has_device: bool = False  # the pattern has a (?P<device>...) group (a BDF the message names)


@dataclass(frozen=True, slots=True)
class KernelRules:
    rules: tuple[KernelRule, ...]
    traps: tuple[re.Pattern[str], ...]
    source: str  # where the rules came from, for messages
    # Which patterns a line can match at all, from one scan for every pattern's required literals (most lines of
    # a kernel log contain none). None: every pattern is tried on every line.
    prefilter: Prefilter | None = None
    slots: tuple[Slot, ...] = ()

    @property
    def classes(self) -> tuple[str, ...]:
        return tuple(r.event_class for r in self.rules)

    def line_scanner(self) -> LineScanner | None:
        """The chunk scan of the readers: only when every pattern has literals (else every line is a candidate)."""
        return self.prefilter if self.prefilter is not None and self.prefilter.chunk_scan else None

    def severity(self, event_class: str) -> str:
        for rule in self.rules:
            if rule.event_class == event_class:
                return rule.severity
        return KERNEL_CLASSES.get(event_class, "warning")


def _patterns(value: object, where: str, problems: list[str]) -> tuple[re.Pattern[str], ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        problems.append(f"{where}: expected a list of regexes, got {type(value).__name__}")
        return ()
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, str):
            problems.append(f"{where}[{i}]: expected a regex string, got {type(item).__name__}")
            continue
        try:
            out.append(re.compile(item))
        except re.error as exc:
            problems.append(f"{where}[{i}]: invalid regex {item!r}: {exc}")
    return tuple(out)


def _seconds(value: object, where: str, default: float, problems: list[str]) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        problems.append(f"{where}: expected a number of seconds >= 0, got {value!r}")
        return default
    return float(value)


def _rule(raw: object, index: int, problems: list[str]) -> KernelRule | None:
    where = f"rules[{index}]"
    if not isinstance(raw, Mapping):
        problems.append(f"{where}: expected a mapping, got {type(raw).__name__}")
        return None
    name = raw.get("class")
    if isinstance(name, str):
        where = f"rules[{index}] ({name})"
    for key in sorted(set(map(str, raw)) - _RULE_KEYS):
        problems.append(f"{where}: unknown key {key!r}")
    if not isinstance(name, str) or not _CLASS_NAME.match(name):
        problems.append(f"{where}: 'class' must be a lower_snake_case name, got {name!r}")
        name = f"<rule {index}>"
    severity = raw.get("severity")
    if severity not in SEVERITIES:
        problems.append(f"{where}: 'severity' must be one of {', '.join(SEVERITIES)}, got {severity!r}")
    elif name in KERNEL_CLASSES and severity != KERNEL_CLASSES[name]:
        problems.append(f"{where}: contract class {name} has severity {KERNEL_CLASSES[name]}, not {severity}")
    anchors = _patterns(raw.get("anchors"), f"{where}.anchors", problems)
    if not anchors and raw.get("anchors") is None:
        problems.append(f"{where}: 'anchors' is required")
    count_group = raw.get("count_group")
    if count_group is not None:
        if not isinstance(count_group, str):
            problems.append(f"{where}: 'count_group' must be a group name")
            count_group = None
        else:
            for p in anchors:
                if count_group not in p.groupindex:
                    problems.append(f"{where}: anchor {p.pattern!r} has no group (?P<{count_group}>...)")
    attribution = raw.get("attribution", "device")
    if attribution not in ATTRIBUTIONS:
        problems.append(f"{where}: 'attribution' must be one of {', '.join(ATTRIBUTIONS)}, got {attribution!r}")
        attribution = "device"
    if attribution == "aer_source":
        for p in anchors:
            if "source" not in p.groupindex:
                problems.append(f"{where}: aer_source anchor {p.pattern!r} has no group (?P<source>...)")
    drivers = raw.get("drivers", ["amdgpu"])
    if not isinstance(drivers, list) or not all(isinstance(d, str) for d in drivers):
        problems.append(f"{where}: 'drivers' must be a list of driver names")
        drivers = ["amdgpu"]
    lookahead = raw.get("lookahead")
    look_class: str | None = None
    look_seconds = 1.0
    if lookahead is not None:
        if not isinstance(lookahead, Mapping) or not isinstance(lookahead.get("class"), str):
            problems.append(f"{where}: 'lookahead' must be {{class: NAME, seconds: N}}")
        else:
            look_class = str(lookahead["class"])
            look_seconds = _seconds(lookahead.get("seconds"), f"{where}.lookahead.seconds", 1.0, problems)
    details = _patterns(raw.get("details"), f"{where}.details", problems)
    followups = _patterns(raw.get("followups"), f"{where}.followups", problems)
    literals = _declared_literals(raw.get("literals"), (*anchors, *followups, *details), where, problems)
    return KernelRule(
        event_class=name,
        severity=str(severity),
        anchors=anchors,
        details=details,
        followups=followups,
        followup_seconds=_seconds(raw.get("followup_seconds"), f"{where}.followup_seconds", 2.0, problems),
        drivers=frozenset(drivers),
        count_group=count_group,
        attribution=str(attribution),
        lookahead_class=look_class,
        lookahead_seconds=look_seconds,
        literals=literals,
    )


def _declared_literals(
    value: object, patterns: tuple[re.Pattern[str], ...], where: str, problems: list[str]
) -> tuple[str, ...]:
    """A rule's ``literals``: each of its patterns must provably need one of them, or the prefilter would skip
    lines the rule matches."""
    if value is None:
        return ()
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        problems.append(f"{where}: 'literals' must be a list of non-empty strings")
        return ()
    for p in patterns:
        if not declared_literals_cover(p, value):
            problems.append(
                f"{where}: pattern {p.pattern!r} can match a line that contains none of the literals {value!r}"
            )
    return tuple(value)


def compile_rules(doc: object, source: str) -> KernelRules:
    """Pure: a parsed YAML document -> compiled rules, or one KernelRulesError listing every problem."""
    problems: list[str] = []
    rules: list[KernelRule] = []
    traps: tuple[re.Pattern[str], ...] = ()
    if not isinstance(doc, Mapping):
        problems.append(f"expected a mapping with 'version' and 'rules', got {type(doc).__name__}")
    else:
        if doc.get("version") != 1:
            problems.append(f"'version' must be 1, got {doc.get('version')!r}")
        for key in sorted(set(map(str, doc)) - {"version", "rules", "traps"}):
            problems.append(f"unknown top-level key {key!r}")
        traps = _patterns(doc.get("traps"), "traps", problems)
        raw_rules = doc.get("rules")
        if not isinstance(raw_rules, list) or not raw_rules:
            problems.append("'rules' must be a non-empty list")
            raw_rules = []
        seen: set[str] = set()
        for i, raw in enumerate(raw_rules):
            rule = _rule(raw, i, problems)
            if rule is None:
                continue
            if rule.event_class in seen:
                problems.append(f"rules[{i}]: class {rule.event_class} defined twice")
            seen.add(rule.event_class)
            rules.append(rule)
        for i, rule in enumerate(rules):
            if rule.lookahead_class is not None and rule.lookahead_class not in seen:
                problems.append(f"rules[{i}] ({rule.event_class}): lookahead class {rule.lookahead_class} has no rule")
    if problems:
        listing = "\n".join(f"  - {p}" for p in problems)
        raise KernelRulesError(f"invalid kernel-log rules in {source} ({len(problems)} problems):\n{listing}")
    slots, slot_literals = _slots(rules, traps)
    return KernelRules(tuple(rules), traps, source, Prefilter(slot_literals), slots)


def _slots(
    rules: list[KernelRule], traps: tuple[re.Pattern[str], ...]
) -> tuple[tuple[Slot, ...], list[Literals | None]]:
    """Every pattern in the order the classifier tries them, with its required literals (None: unfiltered)."""
    slots = [Slot("trap", p, None) for p in traps]
    kinds: tuple[tuple[SlotKind, Callable[[KernelRule], tuple[re.Pattern[str], ...]]], ...] = (
        ("anchor", lambda r: r.anchors),
        ("followup", lambda r: r.followups),
        ("detail", lambda r: r.details),
    )
    for kind, patterns in kinds:
        for rule in rules:
            for p in patterns(rule):
                slots.append(Slot(kind, p, rule, "source" in p.groupindex, "device" in p.groupindex))
    literals = [
        frozenset(s.rule.literals) if s.rule is not None and s.rule.literals else required_literals(s.pattern)
        for s in slots
    ]
    return tuple(slots), literals


def load_rules(path: Path | None = None) -> KernelRules:
    """Read and compile a rules file; None means the file shipped in the package."""
    if path is None:
        return default_rules()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise KernelRulesError(f"cannot read kernel-log rules {path}: {exc.strerror or exc}") from exc
    return _compile_text(text, str(path))


def _compile_text(text: str, source: str) -> KernelRules:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise KernelRulesError(f"invalid kernel-log rules in {source}: not YAML: {exc}") from exc
    return compile_rules(doc, source)


@lru_cache(maxsize=1)
def default_rules() -> KernelRules:
    text = resources.files("exporter").joinpath("data", SHIPPED_RULES).read_text(encoding="utf-8")
    return _compile_text(text, f"exporter/data/{SHIPPED_RULES}")
