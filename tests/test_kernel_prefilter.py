"""The kernel-log prefilter: required literals derived from the rules (sound, checked by hypothesis and over every
line the project holds), the literal index that picks a line's candidate rules, the chunk scan of the followed
file, and equality with the line-by-line classifier it replaced on every input (tests/kernel_log_corpus.py)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernel_log_corpus import EXAMPLE_LINES, GOLDEN, NOISE, A, B, corpus, digest, follow, report
from msgspec.structs import replace

from exporter.config import Config
from exporter.model.kernel import KernelRecord
from exporter.parsers.kernel_log import (
    DEVICE_PREFIX,
    KernelLogLineParser,
    SkippedRecords,
    parse_kernel_log_items,
    parse_kernel_log_records,
    split_message,
)
from exporter.sources.kernel_log import KernelLogSource
from exporter.watchdog.kernel_classify import KernelClassifier, kernel_log_report, match_message
from exporter.watchdog.kernel_literals import declared_literals_cover, literal_sets, required_literals
from exporter.watchdog.kernel_rules import KernelRules, KernelRulesError, compile_rules, default_rules, load_rules
from exporter.yamlfile import safe_load

RULES = default_rules()
UNFILTERED = replace(RULES, prefilter=None)  # every pattern on every line, every line parsed
CORPUS = dict(corpus())
GOLDEN_RESULTS: dict[str, dict[str, object]] = json.loads(GOLDEN.read_text())


def _all_texts() -> list[str]:
    """Every message of every input (the records the line-by-line parser reads), and every example line."""
    texts = set(EXAMPLE_LINES)
    for text in CORPUS.values():
        texts.update(r.text for r in parse_kernel_log_records(text).records)
    return sorted(texts)


ALL_TEXTS = _all_texts()


# -- equality with the line-by-line classifier ------------------------------------------------------------------


def test_the_corpus_is_the_golden_one() -> None:
    assert sorted(CORPUS) == sorted(GOLDEN_RESULTS)
    assert len([n for n in CORPUS if n.startswith("file:")]) == 17  # 13 format fixtures and 4 pastes


@pytest.mark.parametrize("name", sorted(GOLDEN_RESULTS))
def test_report_and_followed_file_equal_the_line_by_line_classifier(name: str) -> None:
    """The full ``parse kernel-log`` JSON and every state of a followed file (appended in random pieces), as the
    classifier before the prefilter gave them (tests/golden/kernel-log-corpus.json)."""
    expected = GOLDEN_RESULTS[name]
    rep = report(CORPUS[name])
    if not name.startswith("generated:"):
        assert rep == expected["report"]
    assert digest(rep) == expected["report_sha256"]
    assert digest(follow(CORPUS[name], list(CORPUS).index(name))) == expected["follow_sha256"]


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_report_equals_the_unfiltered_one(name: str) -> None:
    assert kernel_log_report(CORPUS[name]) == kernel_log_report(CORPUS[name], UNFILTERED)


def _expand(items: tuple[KernelRecord | SkippedRecords, ...]) -> list[KernelRecord]:
    return [r for i in items for r in (i.records() if isinstance(i, SkippedRecords) else (i,))]


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_chunk_reading_gives_the_records_of_line_by_line_reading(name: str) -> None:
    text = CORPUS[name]
    chunked = parse_kernel_log_items(text, RULES.line_scanner())
    whole = parse_kernel_log_records(text)
    assert (chunked.format, _expand(chunked.items), chunked.warnings) == (
        whole.format,
        list(whole.records),
        whole.warnings,
    )
    for run in chunked.items:
        if isinstance(run, SkippedRecords):
            records = list(run.records())
            assert len(records) == run.count and all(r.is_kernel for r in records)
            assert not any(RULES.prefilter and RULES.prefilter.scan(r.text) for r in records)


def _reference_match(rules: KernelRules, text: str) -> tuple[object, ...]:
    """The classifier's match before the prefilter: every trap, then every rule's anchors, followups, details."""
    parts = split_message(text)
    body = parts.body
    if any(t.search(body) for t in rules.traps):
        return ("trap",)
    usable = [r for r in rules.rules if parts.bdf is None or parts.driver in r.drivers]
    for rule in usable:
        for p in rule.anchors:
            m = p.search(body)
            if m is not None:
                count = int(m[rule.count_group]) if rule.count_group else 1
                source = m["source"] if "source" in p.groupindex else None
                device = m["device"] if "device" in p.groupindex else None
                return ("anchor", rule.event_class, count, source, device)
    for rule in usable:
        if any(p.search(body) for p in rule.followups):
            return ("followup", rule.event_class)
    details = tuple(r.event_class for r in usable if any(p.search(body) for p in r.details))
    return ("detail", details) if details else ("none",)


def _new_match(rules: KernelRules, text: str) -> tuple[object, ...]:
    m = match_message(rules, text)
    if m.kind in ("trap", "none"):
        return (m.kind,)
    assert m.rule is not None or m.kind == "detail"
    if m.kind == "detail":
        return ("detail", m.detail_classes)
    assert m.rule is not None
    if m.kind == "followup":
        return ("followup", m.rule.event_class)
    found = next(f for f in (p.search(m.parts.body) for p in m.rule.anchors) if f is not None)
    source = found["source"] if "source" in found.re.groupindex else None
    device = found["device"] if "device" in found.re.groupindex else None
    return ("anchor", m.rule.event_class, m.event_count, source, device)


def test_every_line_matches_as_before() -> None:
    assert len(ALL_TEXTS) > 500
    for text in ALL_TEXTS:
        assert _new_match(RULES, text) == _reference_match(RULES, text), text


_PREFIXES = [
    "",
    f"amdgpu {A}: amdgpu: ",
    f"amdgpu {B}: ",
    "amdgpu: ",
    "[drm] ",
    "[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ",
    "pcieport 0000:00:01.1: ",
    "snd_hda_intel 0000:03:00.1: ",
    "kfd kfd: amdgpu: ",
    "{12}",
    "drmn0: ",
]
_KEYS = sorted(RULES.prefilter.keys) if RULES.prefilter else []
_FRAGMENTS = st.one_of(
    st.sampled_from(_KEYS),
    st.sampled_from(_KEYS).map(lambda k: k[: len(k) // 2]),
    st.sampled_from(_KEYS).map(lambda k: k[len(k) // 2 :]),
    st.sampled_from(["0", "12", "0x1f", " ", "(", ")", "-110", "gfx_0.0.0", "0000:03:00.0", "umc", "\t", "  "]),
    st.text(alphabet="abcXYZ :()[]-_.=0123", max_size=6),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(_PREFIXES), st.lists(_FRAGMENTS, max_size=6))
def test_generated_lines_match_as_before(prefix: str, pieces: list[str]) -> None:
    text = prefix + "".join(pieces)
    assert _new_match(RULES, text) == _reference_match(RULES, text)


# -- the literals are sound ----------------------------------------------------------------------------------------


def _slot_literals(rules: KernelRules) -> list[tuple[re.Pattern[str], frozenset[str]]]:
    assert rules.prefilter is not None
    by_slot: dict[int, set[str]] = {}
    for key, slots in zip(rules.prefilter.keys, rules.prefilter.key_slots, strict=True):
        for s in slots:
            by_slot.setdefault(s, set()).add(key)
    assert sorted(by_slot) == list(range(len(rules.slots)))  # every shipped pattern has literals
    return [(slot.pattern, frozenset(by_slot[i])) for i, slot in enumerate(rules.slots)]


SHIPPED = _slot_literals(RULES)


@pytest.mark.parametrize(("pattern", "literals"), SHIPPED, ids=[p.pattern[:40] for p, _ in SHIPPED])
def test_every_match_of_a_shipped_pattern_contains_one_of_its_literals(
    pattern: re.Pattern[str], literals: frozenset[str]
) -> None:
    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.from_regex(pattern))
    def check(line: str) -> None:
        m = pattern.search(line)
        assert m is not None
        assert any(lit in m.group(0) for lit in literals), (line, sorted(literals))

    check()


def test_every_match_in_the_corpus_contains_a_literal() -> None:
    """Exhaustive over every message the project holds: a pattern that matches has a literal in the match."""
    matched = 0
    for text in ALL_TEXTS:
        body = split_message(text).body
        for pattern, literals in SHIPPED:
            m = pattern.search(body)
            if m is not None:
                matched += 1
                assert any(lit in m.group(0) for lit in literals), (text, pattern.pattern)
    assert matched > 100


@pytest.mark.parametrize(
    ("pattern", "literals"),
    [
        (r"GPU reset\(\d+\) failed", {"GPU reset("}),
        (r"^(?:MODE1|MODE2|BACO) reset$", {"MODE1 reset", "MODE2 reset", "BACO reset"}),
        (r"[Dd]ev(?:ice )?coredump", {"Devcoredump", "devcoredump", "Device coredump", "device coredump"}),
        (r"\d+ (?:new )?(?<!un)correctable hardware errors", {" correctable hardware errors"}),
        (r"abc(?:de)?", {"abc"}),
        (r"x+yzw\d", {"yzw"}),
        (r"x+yzw+", None),  # "yz" is all a run before "w+" gives
        (r"(?:ab|cd)+efg", {"efg"}),
        (r"foo|barbaz", {"foo", "barbaz"}),
        (r"(?i)gpu hang", None),  # any case: no literal
        (r"GPU (?i:hang) detected", {" detected"}),
        (r"\d+\s+\w", None),
        (r"ab?", None),  # too short to filter
        (r"(a)\1xyz", {"xyz"}),
    ],
)
def test_required_literals(pattern: str, literals: set[str] | None) -> None:
    compiled = re.compile(pattern)
    got = required_literals(compiled)
    assert got == (frozenset(literals) if literals is not None else None)


def test_declared_literals_must_cover_every_pattern() -> None:
    aer = next(r for r in RULES.rules if r.event_class == "pcie_aer").anchors[0]
    assert declared_literals_cover(aer, ["AER: "])
    assert not declared_literals_cover(aer, ["Corrected"])  # "Uncorrected (Fatal)" lines have no "Corrected"
    assert not declared_literals_cover(re.compile(r"(?i)gpu hang"), ["hang"])  # "HANG" has none
    assert declared_literals_cover(re.compile(r"GPU (?:hang|stall)"), ["GPU "])
    assert literal_sets(re.compile(r"x")) == frozenset({"x"})


def _rules(tmp_path: Path, body: str) -> KernelRules:
    path = tmp_path / "rules.yml"
    path.write_text("version: 1\nrules:\n" + body)
    return load_rules(path)


def test_the_loader_rejects_literals_a_pattern_does_not_need(tmp_path: Path) -> None:
    with pytest.raises(KernelRulesError) as err:
        _rules(
            tmp_path,
            "  - class: my_hang\n    severity: critical\n    anchors: ['GPU (?:hang|stall) on ring \\S+']\n"
            "    literals: ['hang']\n",
        )
    assert "can match a line that contains none of the literals ['hang']" in str(err.value)
    with pytest.raises(KernelRulesError, match="'literals' must be a list of non-empty strings"):
        _rules(tmp_path, "  - class: my_hang\n    severity: critical\n    anchors: ['x']\n    literals: ['']\n")


def test_declared_literals_are_scanned_for(tmp_path: Path) -> None:
    rules = _rules(
        tmp_path,
        "  - class: my_hang\n    severity: critical\n    anchors: ['GPU (?:hang|stall) on ring \\S+']\n"
        "    literals: ['on ring ']\n",
    )
    assert rules.prefilter is not None and rules.prefilter.keys == ("on ring ",)
    log = f"[ 1.0] amdgpu {A}: GPU stall on ring gfx\n[ 2.0] usb 1-1: on ring? no\n"
    assert kernel_log_report(log, rules)["counts"] == {A: {"my_hang": 1}}


def test_a_pattern_without_literals_is_tried_on_every_line(tmp_path: Path) -> None:
    rules = _rules(tmp_path, "  - class: my_hang\n    severity: critical\n    anchors: ['(?i)gpu hang']\n")
    assert rules.prefilter is not None and rules.prefilter.unfiltered == (0,)
    assert rules.line_scanner() is None  # the followed file parses every line then
    log = "".join(f"[ {i}.0] usb 1-1: noise {i}\n" for i in range(50)) + f"[ 60.0] amdgpu {A}: GPU HANG\n"
    assert kernel_log_report(log, rules)["counts"] == {A: {"my_hang": 1}}
    assert kernel_log_report(log, replace(rules, prefilter=None)) == kernel_log_report(log, rules)


# -- the index: a line is tried against the rules whose literal it holds ---------------------------------------------


def test_a_candidate_is_tried_only_against_the_rules_whose_literal_it_holds() -> None:
    assert RULES.prefilter is not None
    text = f"amdgpu {A}: amdgpu: GPU reset begin!"
    parts = split_message(text)
    slots = list(RULES.prefilter.slots_in(RULES.prefilter.scan(text), parts.start, len(text)))
    assert [r.event_class for r in (RULES.slots[s].rule for s in slots) if r is not None] == ["gpu_reset_begin"]
    # a literal in the device prefix is not one in the body
    assert not RULES.prefilter.slots_in(RULES.prefilter.scan("GPU reset begin!: x"), 18, 19)


def test_a_noise_line_is_never_split() -> None:
    c = KernelClassifier(RULES)
    assert c.feed(KernelRecord(line=1, text=f"amdgpu {A}: amdgpu: SMU is initialized successfully!")) == []
    assert c._seen_gpus == {A}  # it still names a GPU
    assert c._plans == {} and c._older_plans == {}  # and was never split or matched (nor kept)


# -- the chunk path of the followed file ---------------------------------------------------------------------------


def test_skipped_records_name_only_the_gpus_their_prefix_names() -> None:
    log = (
        "[ 1.0] usb 1-1: new device\n"
        f"[ 1.1] snd_hda_intel 0000:03:00.1: amdgpu 0000:05:00.0: not a prefix of this message\n"
        f"[ 1.2] amdgpu {B}: amdgpu: SE 4, SH per SE 2\n"
        f"[ 1.3] amdgpu {B}: amdgpu: SE 4 again\n"
    )
    first, run = parse_kernel_log_items(log, RULES.line_scanner()).items  # the first line tells the format
    assert isinstance(first, KernelRecord) and first.line == 1
    assert isinstance(run, SkippedRecords) and run.count == 3 and run.first_line == 2
    assert run.amdgpu_devices(set()) == {B}
    assert run.amdgpu_devices({B}) == set()
    expected = {m["bdf"].lower() for r in run.records() if (m := DEVICE_PREFIX.match(r.text)) and m["drv"] == "amdgpu"}
    assert expected == {B}


def test_lookahead_through_skipped_noise_and_a_reboot() -> None:
    """An old-format timeout waits for its reset; the noise after it (a clock that jumps back at a reboot) must
    expire it exactly as record-by-record feeding does."""
    log = (
        "[ 100.000000] [drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx timeout, signaled seq=1, emitted seq=3\n"
        + "".join(f"[ 100.{i:06d}] usb 1-1: noise {i}\n" for i in range(1, 30))
        + "[ 101.500000] usb 1-1: the window has passed here\n"
        + f"[ 101.600000] amdgpu {B}: amdgpu: SE 4, SH per SE 2\n"  # two GPUs: the timeout's device is not known
        + "[   0.500000] Linux version 6.18\n"  # a reboot: the clock starts again
        + f"[   0.600000] amdgpu {A}: amdgpu: GPU reset begin!\n"
    )
    rep = kernel_log_report(log)
    assert rep == kernel_log_report(log, UNFILTERED)
    assert rep["counts"] == {A: {"gpu_reset_begin": 1}, "unknown": {"ring_timeout": 1}}


def test_lines_a_literal_joins_after_colour_codes_are_removed() -> None:
    log = "[ 1.0] usb 1-1: x\n[ 2.0] \x1b[1mamdgpu 0000:03:00.0: amdgpu: GPU reset \x1b[0mbegin!\n[ 3.0] usb 1-1: y\n"
    assert kernel_log_report(log)["counts"] == {A: {"gpu_reset_begin": 1}}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["dmesg", "journal-short", "journal-rfc3339"]),
    st.lists(
        st.tuples(
            st.sampled_from(
                [
                    *NOISE,
                    *EXAMPLE_LINES[::3],
                    "",
                    "  continued line",
                    "\x1b[31mcoloured\x1b[0m",
                    "no header",
                    "-- Boot 1 --",
                ]
            ),
            st.sampled_from(["kernel", "kernel", "kernel", "sshd[1]", "host:"]),
            st.floats(0, 5000, allow_nan=False).map(lambda f: round(f, 6)),
        ),
        max_size=40,
    ),
)
def test_generated_logs_read_and_classify_as_line_by_line(fmt: str, lines: list[tuple[str, str, float]]) -> None:
    out = []
    for msg, ident, mono in lines:
        if not msg or msg.startswith(("  ", "no header", "-- ")):
            out.append(msg)
        elif fmt == "dmesg":
            out.append(f"[{mono:12.6f}] {msg}")
        elif fmt == "journal-short":
            out.append(f"Aug 29 10:40:05 {'gpunode1 ' if mono > 100 else ''}{ident}: {msg}")
        else:
            out.append(f"2026-08-29T10:40:05.000001+00:00 gpunode1 {ident}: [{mono:12.6f}] {msg}")
    text = "".join(line + "\n" for line in out)
    try:
        whole = parse_kernel_log_records(text)
    except Exception as exc:
        with pytest.raises(type(exc)):
            parse_kernel_log_items(text, RULES.line_scanner())
        return
    chunked = parse_kernel_log_items(text, RULES.line_scanner())
    assert (chunked.format, _expand(chunked.items), chunked.warnings) == (
        whole.format,
        list(whole.records),
        whole.warnings,
    )
    assert kernel_log_report(text) == kernel_log_report(text, UNFILTERED)


def test_followed_file_counts_noise_records_without_parsing_them(tmp_path: Path) -> None:
    (tmp_path / "proc/sys/kernel/random").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/random/boot_id").write_text("b\n")
    log = tmp_path / "kern.log"
    noise = "".join(f"[ {i}.000000] usb 1-1: noise {i}\n" for i in range(1000))
    log.write_text(noise + f"[ 2000.000000] amdgpu {A}: amdgpu: GPU reset begin!\n" + noise)
    config = Config(kernel_log_path=log, state_dir=tmp_path / "state", procfs=tmp_path / "proc", sysfs=tmp_path)
    source = KernelLogSource(config, lambda: [A])
    state = source.collect()
    source.close()
    assert state.records_read == 2001 and state.records_ignored == 0 and state.lines_unparsed == 0
    assert state.counts[(A, "gpu_reset_begin")] == 1
    assert (
        os.path.getsize(log)
        == json.loads((tmp_path / "state" / "kernel-log-cursor.json").read_text())["file"]["offset"]
    )


def test_a_feed_chunk_without_scanner_is_feed_line_by_line() -> None:
    text = CORPUS["generated:2:dmesg"]
    parser = KernelLogLineParser()
    items = parser.feed_chunk(text.encode(), 1, None)
    assert all(isinstance(i, KernelRecord) for i in items)
    assert items == list(parse_kernel_log_records(text).records)


def test_rules_from_a_document_get_a_prefilter() -> None:
    rules = compile_rules(
        {"version": 1, "rules": [{"class": "x_y", "severity": "info", "anchors": ["hello there"]}]}, "t"
    )
    assert rules.prefilter is not None and rules.prefilter.keys == ("hello there",)
    assert rules.line_scanner() is rules.prefilter


def test_followed_file_without_known_gpus_learns_them_from_skipped_lines(tmp_path: Path) -> None:
    """No GPU known to the identity sources: a line naming no device goes to the one GPU the log has named, even
    when only skipped (literal-free) lines named it."""
    (tmp_path / "proc/sys/kernel/random").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/random/boot_id").write_text("b\n")
    log = tmp_path / "kern.log"
    lines = [f"[ {i}.0] usb 1-1: noise {i}" for i in range(20)]
    lines[7] = f"[ 7.0] amdgpu {B}: amdgpu: SMU is initialized successfully!"
    log.write_text("\n".join([*lines, "[ 30.0] [drm] VRAM is lost due to GPU reset!", ""]))
    states = []
    for rules in (RULES, UNFILTERED):
        config = Config(kernel_log_path=log, state_dir=tmp_path / f"state-{id(rules)}", procfs=tmp_path / "proc")
        source = KernelLogSource(config, lambda: [], rules=rules)
        states.append(source.collect())
        source.close()
    assert states[0].counts == states[1].counts
    assert states[0].counts[(B, "vram_lost")] == 1


def test_the_json_twin_of_the_shipped_rules_is_current_and_used() -> None:
    """exporter/data/kernel_log_rules.json spares every start PyYAML; it must say what the YAML says."""
    from exporter.watchdog import kernel_rules

    data = Path(kernel_rules.__file__).resolve().parent.parent / "data"
    text = (data / kernel_rules.SHIPPED_RULES).read_text(encoding="utf-8")
    twin = (data / kernel_rules.SHIPPED_RULES_JSON).read_text(encoding="utf-8")
    assert twin == kernel_rules.shipped_rules_json(text), "run: python -m exporter.watchdog.kernel_rules"
    from_yaml = kernel_rules.compile_rules(safe_load(text, "rules"), "x")
    doc = json.loads(twin)
    from_twin = kernel_rules.compile_rules(doc["rules"], "x", doc["slot_literals"])
    assert from_twin.rules == from_yaml.rules and from_twin.traps == from_yaml.traps
    assert from_twin.prefilter is not None and from_yaml.prefilter is not None
    assert from_twin.prefilter.keys == from_yaml.prefilter.keys
    assert from_twin.prefilter.key_slots == from_yaml.prefilter.key_slots
    kernel_rules.default_rules.cache_clear()
    assert kernel_rules.default_rules().rules == from_yaml.rules


def test_the_shipped_rules_compile_a_pattern_when_a_line_first_needs_it() -> None:
    """Loading the shipped rules from their twin (checked in full when it was written) compiles none of their
    regexes; a line compiles the patterns it is tried against. A user's file is compiled, and checked, at load."""
    from exporter.watchdog import kernel_rules

    data = Path(kernel_rules.__file__).resolve().parent.parent / "data"
    doc = json.loads((data / kernel_rules.SHIPPED_RULES_JSON).read_text(encoding="utf-8"))
    rules = compile_rules(doc["rules"], "x", doc["slot_literals"], checked=True)
    assert rules.prefilter is not None and all(s.compiled is None for s in rules.slots)
    text = f"amdgpu {A}: amdgpu: GPU reset begin!"
    match = match_message(rules, text)
    assert match.rule is not None and match.rule.event_class == "gpu_reset_begin"
    tried = set(rules.prefilter.slots_in(rules.prefilter.scan(text), 0, len(text)))
    assert {i for i, s in enumerate(rules.slots) if s.compiled is not None} == tried != set()
    assert all(s.compiled is not None for s in load_rules(data / kernel_rules.SHIPPED_RULES).slots)


def test_the_twin_spares_yaml_and_a_stale_twin_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    from exporter.watchdog import kernel_rules

    parsed: list[str] = []
    real = safe_load

    def recording(text: str, name: str) -> object:
        parsed.append(name)
        return real(text, name)

    monkeypatch.setattr(kernel_rules, "safe_load", recording)
    kernel_rules.default_rules.cache_clear()
    try:
        assert kernel_rules.default_rules().rules and parsed == []  # the current twin: no YAML parsed
        monkeypatch.setattr(kernel_rules, "_sha256", lambda text: "not the hash of the shipped YAML")
        kernel_rules.default_rules.cache_clear()
        rules = kernel_rules.default_rules()
        assert parsed == [f"exporter/data/{kernel_rules.SHIPPED_RULES}"] and rules.rules
    finally:
        kernel_rules.default_rules.cache_clear()
