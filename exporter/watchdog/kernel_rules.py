"""Kernel-log classification rules: loaded from YAML (shipped in ``exporter/data`` or given by the user) and
compiled once. An invalid file raises one ``KernelRulesError`` whose message lists every problem.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

import yaml

from exporter.model.kernel import KERNEL_CLASSES

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


@dataclass(frozen=True, slots=True)
class KernelRules:
    rules: tuple[KernelRule, ...]
    traps: tuple[re.Pattern[str], ...]
    source: str  # where the rules came from, for messages
    # Literals of which every pattern needs one: a line containing none of them matches no rule (most lines
    # of a kernel log), and substring tests are far cheaper than a hundred regex searches. None: no shortcut.
    prefilter: tuple[str, ...] | None = None

    @property
    def classes(self) -> tuple[str, ...]:
        return tuple(r.event_class for r in self.rules)

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
    return KernelRule(
        event_class=name,
        severity=str(severity),
        anchors=anchors,
        details=_patterns(raw.get("details"), f"{where}.details", problems),
        followups=_patterns(raw.get("followups"), f"{where}.followups", problems),
        followup_seconds=_seconds(raw.get("followup_seconds"), f"{where}.followup_seconds", 2.0, problems),
        drivers=frozenset(drivers),
        count_group=count_group,
        attribution=str(attribution),
        lookahead_class=look_class,
        lookahead_seconds=look_seconds,
    )


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
    return KernelRules(tuple(rules), traps, source, _prefilter(rules, traps))


_META = set(".^$*+?{}[]()|")
_OPTIONAL = set("?*{")


def required_literal(pattern: str) -> str | None:
    """The longest run of plain characters every match of ``pattern`` must contain, or None.

    Only top-level literal runs count (groups, classes and escapes such as ``\\d`` end a run; a character
    followed by ``?``, ``*`` or ``{`` is optional). A top-level ``|`` or an inline flag gives None.
    """
    if "(?i" in pattern or "(?x" in pattern:
        return None
    runs: list[str] = []
    run: list[str] = []
    depth = 0
    in_class = False
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        nxt = pattern[i + 1] if i + 1 < len(pattern) else ""
        literal: str | None = None
        if ch == "\\":
            if nxt and not nxt.isalnum():
                literal = nxt
            i += 2
        else:
            i += 1
            if in_class:
                in_class = ch != "]"
                continue
            if ch == "[":
                in_class = True
            elif ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
            elif ch == "|" and depth == 0:
                return None
            elif ch not in _META:
                literal = ch
        following = pattern[i] if i < len(pattern) else ""
        if literal is not None and depth == 0 and not in_class:
            if following in _OPTIONAL:
                runs.append("".join(run))
                run = []
            else:
                run.append(literal)
                if following == "+":
                    runs.append("".join(run))
                    run = []
        else:
            if run:
                runs.append("".join(run))
            run = []
    runs.append("".join(run))
    best = max(runs, key=len)
    return best if len(best) >= 3 else None


def _prefilter(rules: list[KernelRule], traps: tuple[re.Pattern[str], ...]) -> tuple[str, ...] | None:
    """Literals of which every rule pattern contains one; None when some pattern has no usable literal."""
    patterns = [*traps]
    for rule in rules:
        patterns += [*rule.anchors, *rule.followups, *rule.details]
    literals = set()
    for p in patterns:
        lit = required_literal(p.pattern)
        if lit is None:
            return None
        literals.add(lit)
    # "abc" already covers "xabcx"
    minimal = {lit for lit in literals if not any(o != lit and o in lit for o in literals)}
    return tuple(sorted(minimal, key=len))


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
