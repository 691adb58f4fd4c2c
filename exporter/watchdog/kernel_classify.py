"""Pure kernel-log classifier: records -> events, attributed to a GPU (by BDF) or ``unknown``.

Attribution, in order: the record's structured device (kmsg ``DEVICE=+pci:...``, journald ``_KERNEL_DEVICE``),
then the BDF of the dev_printk prefix in the text, then a BDF the message itself names (an anchor's ``device``
group: ``amdgpu: probe of 0000:43:00.0 failed``), then the single-GPU rule (exactly one GPU known), else
``unknown``. A rule with a ``lookahead`` (the old-format ring timeout, which names no device before Linux
6.12) instead waits up to ``seconds`` for the next event of the lookahead class (``GPU reset begin!``) and takes
its device. ``pcie_aer`` lines count only when the AER source is a known GPU or a port directly above one.

Reset sequences (contract section 2): a GPU's reset is open from its ``GPU reset begin!`` to its
``GPU reset(N) succeeded!`` or failure. An unprefixed ``VRAM is lost due to GPU reset!`` (most kernels print it
with ``DRM_INFO``) on a log naming several GPUs goes to the GPU whose reset is the only one open; with two open (a
hive reset) or none it stays ``unknown``. The open resets are state like the pending lookaheads: the source
persists them with its cursor (``open_resets``/``restore_open_resets``), so a restart between the reset line and
the VRAM line attributes it all the same. A reset left open longer than ``RESET_OPEN_MAX_SECONDS`` of kernel time
(its end was lost) is closed.

Multi-line events count once on their anchor. Detail lines stay with the last anchor of the same device and
never count; a detail line with no open event (the log window began in the middle of an event) is dropped
and counted in ``orphan_details``: counting it as an anchor would count a fault whose header we never saw
and, after a restart inside an event, count it twice. Traps never count.

A message is split and matched only when it holds one of the rules' required literals (one scan, see
``kernel_literals``), and then only against the patterns whose literal it holds; it is split once. Readers
hand over runs of records without any literal as ``SkippedRecords``: they count as records, name GPUs, and
are fed one by one only while a look-ahead waits for a later record's timestamp.

What a message matched depends on its text alone, and a fault storm repeats the same texts with other
timestamps: the classifier keeps, per text, a ``_Plan`` (the match, and for the usual cases what it does with
the record: the event it makes, the detail it checks) in a bounded cache. ``feed_many`` takes a reader's whole
batch in one loop that carries out those plans inline.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from typing import Literal, NamedTuple

import msgspec
from msgspec.structs import replace

from exporter.model.kernel import KERNEL_FACILITY, UNKNOWN_DEVICE, KernelEvent, KernelRecord
from exporter.parsers.common import normalize_bdf
from exporter.parsers.kernel_log import (
    MessageParts,
    SkippedRecords,
    amdgpu_device,
    amdgpu_prefixes,
    parse_kernel_log_items,
    split_message,
)
from exporter.watchdog.kernel_rules import KernelRule, KernelRules, default_rules

MatchKind = Literal["anchor", "followup", "detail", "trap", "none"]
RECORD_WINDOW = 20  # followup / lookahead window in records when the log has no timestamps
# Messages whose match is remembered, at most: two halves, the older dropped when the newer is full (a message
# used again is kept), so a storm of unique texts does not empty the cache of the texts it keeps repeating.
MATCH_CACHE_SIZE = 4096
# ... and at most about this many bytes (a long text costs more; ``plan_bytes``): 1 MiB is ~2,000 plans of an
# 80-character amdgpu line. The source drops the whole cache when it gives a worked-off backlog's memory back
# (``drop_cache``): plans made through a backlog are scattered over the heap and would pin its pages.
MATCH_CACHE_BYTES = 1 << 20
PLAN_OVERHEAD_BYTES = (
    400  # measured (tracemalloc): a plan, its LineMatch and parts and the dict entry, ~475 B at 45 chars
)


def plan_bytes(text: str) -> int:
    """What a cached plan of ``text`` costs, about: the key, the message parts (about the text again), the rest."""
    return PLAN_OVERHEAD_BYTES + 2 * len(text)


# Reset sequences: the class that opens one, those that close it, and the classes attributed by the open one.
RESET_OPENS = "gpu_reset_begin"
RESET_CLOSES = frozenset({"gpu_reset_succeeded", "gpu_reset_failed"})
_RESET_MARKS = RESET_CLOSES | {RESET_OPENS}
BY_OPEN_RESET = frozenset({"vram_lost"})
# A mode1 reset of an MI300X takes seconds, a hive reset a minute: an open reset older than this lost its end.
RESET_OPEN_MAX_SECONDS = 600.0


_AER_UNCORRECTED = r"Uncorrect(?:ed|able) \((Non-)?Fatal\)"  # compiled when first needed (re keeps it)


def aer_severity(message: str) -> str:
    """The AER severity a ``pcie_aer`` line reports: ``corrected`` (Corrected/Correctable), else
    ``uncorrected_nonfatal`` or ``uncorrected_fatal`` (drivers/pci/pcie/aer.c ``aer_error_severity_string``)."""
    m = re.search(_AER_UNCORRECTED, message, re.IGNORECASE)
    if m is None:
        return "corrected"
    return "uncorrected_nonfatal" if m.group(1) else "uncorrected_fatal"


class LineMatch(msgspec.Struct, frozen=True, gc=False):
    """What one message matched (a msgspec struct: made faster than a tuple, never tracked by the garbage
    collector)."""

    kind: MatchKind
    parts: MessageParts
    rule: KernelRule | None = None  # the anchor / followup rule
    detail_classes: tuple[str, ...] = ()  # classes whose detail patterns match
    event_count: int = 1  # N of "N callbacks suppressed", else 1
    source_bdf: str | None = None  # AER source
    device_bdf: str | None = None  # the device the message text names (a "device" group: "probe of 0000:..")


def _source_bdf(source: str, reporter: str | None) -> str | None:
    """An AER source: a BDF, or the requester id of older kernels ("id=0300": bus 03, device 00, function 0) in the
    PCI domain of the port that reported it."""
    if ":" in source:
        return normalize_bdf(source)
    rid = int(source, 16)
    domain = reporter.split(":", 1)[0] if reporter else "0000"
    return f"{domain}:{rid >> 8:02x}:{(rid >> 3) & 0x1F:02x}.{rid & 7}"


def match_message(rules: KernelRules, text: str) -> LineMatch:
    """Which rule a message matches, ignoring attribution (the table tests use this directly)."""
    hits = rules.prefilter.scan(text) if rules.prefilter is not None else None
    return _match(rules, split_message(text), hits)


def _match(rules: KernelRules, parts: MessageParts, hits: list[tuple[int, int, int]] | None) -> LineMatch:
    """Try the patterns whose literals occur in the body, in the order traps, anchors, followups, details
    (rules in file order): the first trap, anchor or followup that matches decides; details all count."""
    body = parts.body
    if hits is None:
        candidates: Iterable[int] = range(len(rules.slots))
    else:
        assert rules.prefilter is not None
        candidates = rules.prefilter.slots_in(hits, parts.start, parts.start + len(body))
    slots = rules.slots
    other_driver = parts.driver if parts.bdf is not None else None  # lines without a prefix may match any rule
    details: list[str] = []
    for index in candidates:
        slot = slots[index]
        rule = slot.rule
        if other_driver is not None and rule is not None and other_driver not in rule.drivers:
            continue
        pattern = slot.compiled
        if pattern is None:  # the shipped rules' patterns are compiled when a line first needs them
            pattern = slot.compile()
        m = pattern.search(body)
        if m is None:
            continue
        kind = slot.kind
        if kind == "detail":  # the last kind: no trap, anchor or followup matched
            assert rule is not None
            if not details or details[-1] != rule.event_class:
                details.append(rule.event_class)
            continue
        if kind == "trap":
            return LineMatch("trap", parts)
        assert rule is not None
        if kind == "followup":
            return LineMatch("followup", parts, rule)
        count = int(m[rule.count_group]) if rule.count_group is not None else 1
        source = _source_bdf(m["source"], parts.bdf) if slot.has_source and m["source"] else None
        named = normalize_bdf(m["device"]) if slot.has_device and m["device"] else None
        return LineMatch("anchor", parts, rule, (), count, source, named)
    if details:
        return LineMatch("detail", parts, detail_classes=tuple(details))
    return LineMatch("none", parts)


# What the classifier does with a record whose text has this plan (_Plan.code).
_NOTHING = 0  # no literal, no match: the record only names its GPU
_TRAP = 1
_DETAIL = 2  # a detail line of a device its prefix names: it counts nothing, it may be an orphan
_ANCHOR = 3  # an anchor of a device the text names, attributed by it: the event is the same but for the record's
_GENERAL = 4  # everything else (followups, AER sources, devices from the record or the known GPUs): _apply


class _Plan(NamedTuple):
    """What the classifier does with every record of one message text (see _NOTHING...). A tuple of fixed
    length: ``feed_many`` unpacks it in one step."""

    code: int
    gpu: str | None  # the GPU the amdgpu prefix names: it is seen
    match: LineMatch | None  # None: the text holds no literal (such plans are not cached)
    device: str = ""  # _ANCHOR: the event's device; _DETAIL: the device whose last anchor is looked up
    event_class: str = ""  # _ANCHOR: the event's class, severity, message and count
    severity: str = ""
    message: str = ""
    count: int = 1  # type: ignore[assignment]  # hides tuple.count, which no one needs
    key: tuple[str, str] = ("", "")  # _ANCHOR: (class, device) and (class, "") of _last_of_class
    key_any: tuple[str, str] = ("", "")
    detail_classes: tuple[str, ...] = ()  # _DETAIL


# The fields of a plan that is not an _ANCHOR or a _DETAIL, after code, gpu and match.
_NO_FIELDS = ("", "", "", "", 1, ("", ""), ("", ""), ())


def _new_plan(code: int, gpu: str | None, match: LineMatch | None) -> _Plan:
    # tuple.__new__, every field in order: a NamedTuple's constructor is a Python function, a call more per miss
    return tuple.__new__(_Plan, (code, gpu, match, *_NO_FIELDS))


_NOTHING_PLAN = _new_plan(_NOTHING, None, None)


def _plan_of(rules: KernelRules, text: str, hits: list[tuple[int, int, int]] | None) -> _Plan:
    """The plan of a message, from the literals found in it (``Prefilter.scan``; None: no prefilter): split
    and matched when it holds one."""
    prefilter = rules.prefilter
    if not hits and prefilter is not None and prefilter.complete:
        # No literal: no pattern can match, so the message is never split. It may still name a GPU.
        gpu = amdgpu_device(text)
        return _new_plan(_NOTHING, gpu, None) if gpu is not None else _NOTHING_PLAN
    parts = split_message(text)
    match = _match(rules, parts, hits)
    bdf = parts.bdf
    gpu = bdf if parts.driver == "amdgpu" else None
    kind = match.kind
    if kind == "none":
        return _new_plan(_NOTHING, gpu, match)
    if kind == "trap":
        return _new_plan(_TRAP, gpu, match)
    if kind == "detail":
        if bdf is not None:
            fields = (_DETAIL, gpu, match, bdf, "", "", "", 1, ("", ""), ("", ""), match.detail_classes)
            return tuple.__new__(_Plan, fields)
        return _new_plan(_GENERAL, gpu, match)
    rule = match.rule
    assert rule is not None
    device = bdf or match.device_bdf
    if kind == "anchor" and rule.attribution == "device" and device is not None:
        cls = rule.event_class
        fields = (
            _ANCHOR, gpu, match, device, cls, rule.severity, parts.body.strip(), match.event_count, (cls, device),
            (cls, ""), (),
        )  # fmt: skip
        return tuple.__new__(_Plan, fields)
    return _new_plan(_GENERAL, gpu, match)


class _Pending:
    __slots__ = ("event", "index", "rule", "ticks")

    def __init__(self, event: KernelEvent, rule: KernelRule, index: int) -> None:
        self.event = event  # pci_bus is UNKNOWN_DEVICE until resolved
        self.rule = rule
        self.index = index  # record index when it was seen
        self.ticks = 0


# The last anchor of a device or class: (event class, monotonic seconds, record index). A plain tuple, one per
# event: the cheapest record to make, and the garbage collector stops tracking it at once.
_Anchor = tuple[str, float | None, int]


class KernelClassifier:
    """Stateful (pending lookaheads, open multi-line events) but pure: no I/O, no clock."""

    MAX_PENDING_TICKS = 3  # expire() calls a lookahead survives when the clock cannot decide

    def __init__(
        self,
        rules: KernelRules | None = None,
        known_gpus: Iterable[str] = (),
        aer_ports: Mapping[str, str] | None = None,
    ) -> None:
        self.rules = rules if rules is not None else default_rules()
        self._known: frozenset[str] = frozenset()
        self._aer_ports: Mapping[str, str] = {}
        self.set_topology(known_gpus, aer_ports or {})
        self._seen_gpus: set[str] = set()
        self._index = 0
        self._pending: list[_Pending] = []
        self._last_anchor: dict[str, _Anchor] = {}
        self._last_of_class: dict[tuple[str, str], _Anchor] = {}
        # GPU -> kernel time (monotonic seconds, None in a log without them) its open reset began
        self._open_resets: dict[str, float | None] = {}
        # The plans of the messages matched lately, newer and older half (see MATCH_CACHE_SIZE).
        self._plans: dict[str, _Plan] = {}
        self._older_plans: dict[str, _Plan] = {}
        self._plans_bytes = 0  # plan_bytes of the newer half
        self.orphan_details = 0
        self.traps = 0
        self.aer_not_gpu = 0

    def set_topology(self, known_gpus: Iterable[str], aer_ports: Mapping[str, str]) -> None:
        """The GPUs the identity sources know, and ``port BDF -> GPU BDF`` for the ports directly above them."""
        self._known = frozenset(b for b in (normalize_bdf(g) for g in known_gpus) if b)
        self._aer_ports = {
            p: g for p, g in ((normalize_bdf(k), normalize_bdf(v)) for k, v in aer_ports.items()) if p and g
        }

    def _gpus(self) -> Collection[str]:
        return self._known or self._seen_gpus

    def _device(self, record: KernelRecord, parts: MessageParts, named: str | None = None) -> str | None:
        if record.device is not None:
            return record.device
        if parts.bdf is not None:
            return parts.bdf
        if named is not None:
            return named
        gpus = self._gpus()
        if len(gpus) == 1:
            return next(iter(gpus))
        return None

    def _within(self, then: _Anchor, record: KernelRecord, seconds: float) -> bool:
        _event_class, monotonic, record_index = then
        if monotonic is not None and record.monotonic_seconds is not None:
            return 0 <= record.monotonic_seconds - monotonic <= seconds
        return self._index - record_index <= RECORD_WINDOW

    def _event(self, record: KernelRecord, match: LineMatch, rule: KernelRule, device: str) -> KernelEvent:
        # positional, every field in KernelEvent's order (line, class, pci_bus, severity, message, monotonic,
        # count, seq, wall_time)
        return KernelEvent(
            record.line,
            rule.event_class,
            device,
            rule.severity,
            match.parts.body.strip(),
            record.monotonic_seconds,
            match.event_count,
            record.seq,
            record.wall_time,
        )

    def _remember(self, key: str, event_class: str, record: KernelRecord) -> None:
        anchor = (event_class, record.monotonic_seconds, self._index)
        last_anchor, last_of_class = self._last_anchor, self._last_of_class
        last_anchor[key] = last_anchor[""] = anchor
        last_of_class[(event_class, key)] = last_of_class[(event_class, "")] = anchor

    def _expire_by_record(self, record: KernelRecord) -> list[KernelEvent]:
        expired: list[KernelEvent] = []
        keep: list[_Pending] = []
        for p in self._pending:
            mono = p.event.monotonic_seconds
            if mono is not None and record.monotonic_seconds is not None:
                late = record.monotonic_seconds - mono > p.rule.lookahead_seconds
            else:
                late = self._index - p.index > RECORD_WINDOW
            if late:
                expired.append(p.event)
            else:
                keep.append(p)
        self._pending = keep
        return expired

    def _plan(self, text: str) -> _Plan:
        """The plan of a message not in the newer half of the cache."""
        plan = self._older_plans.get(text)
        if plan is None:
            prefilter = self.rules.prefilter
            plan = _plan_of(self.rules, text, prefilter.scan(text) if prefilter is not None else None)
            if plan.match is None:  # no literal: as quickly found again as looked up, and mostly unique (noise)
                return plan
        self._keep(text, plan)
        return plan

    def _keep(self, text: str, plan: _Plan) -> None:
        plans = self._plans
        cost = plan_bytes(text)
        if len(plans) >= MATCH_CACHE_SIZE // 2 or self._plans_bytes + cost > MATCH_CACHE_BYTES // 2:
            self._older_plans = plans
            self._plans = plans = {}
            self._plans_bytes = 0
        plans[text] = plan
        self._plans_bytes += cost

    def drop_cache(self) -> None:
        """Forget every cached plan (they are made again as texts come): before the heap is trimmed."""
        self._plans, self._older_plans, self._plans_bytes = {}, {}, 0

    def cache_bytes(self) -> int:
        """What the cached plans cost, about (``plan_bytes``), both halves."""
        return self._plans_bytes + sum(plan_bytes(t) for t in self._older_plans)

    def feed(self, record: KernelRecord) -> list[KernelEvent]:
        """Classify one kernel record (the caller drops records that are not from the kernel)."""
        out: list[KernelEvent] = []
        self.feed_into(record, out)
        return out

    def feed_into(self, record: KernelRecord, out: list[KernelEvent]) -> None:
        """``feed``, appending the events to ``out``."""
        self._index += 1
        if self._pending:
            out.extend(self._expire_by_record(record))
        text = record.text
        plan = self._plans.get(text) or self._plan(text)
        if plan.gpu is not None:
            self._seen_gpus.add(plan.gpu)
        if plan.code == _TRAP:
            self.traps += 1
        elif plan.match is not None and plan.code != _NOTHING:
            self._apply(record, plan.match, out)

    def feed_many(self, items: Iterable[KernelRecord | SkippedRecords], out: list[KernelEvent]) -> tuple[int, int]:
        """A reader's batch, in order: each record from the kernel as ``feed_into`` takes it, the others (user
        space writing to /dev/kmsg, ``KernelRecord.is_kernel``) dropped, each run of ``SkippedRecords`` as ``skip``
        takes it. Returns (records, records dropped).

        The loop a busy log's lines go through: a message whose plan is cached and is the usual one (an anchor or
        a detail line of the GPU its prefix names, a line matching nothing) is carried out here, without a call."""
        read = ignored = 0
        event = KernelEvent
        append = out.append
        seen_add = self._seen_gpus.add
        last_anchor, last_of_class = self._last_anchor, self._last_of_class
        plans = self._plans
        # Runs of skipped records while the GPUs are known: the GPUs they name matter only once none is known
        # (_gpus), so they are looked up after the loop, for all runs of a chunk at once (_see_gpus_of).
        unseen: list[SkippedRecords] = []
        for item in items:
            if type(item) is not KernelRecord:
                assert isinstance(item, SkippedRecords)
                read += item.count
                if self._known and not self._pending:
                    self._index += item.count
                    unseen.append(item)
                else:
                    out.extend(self.skip(item))
                continue
            read += 1
            # KernelRecord.is_kernel, inlined (a property call per line otherwise)
            facility = item.facility
            if facility is not None:
                if facility != KERNEL_FACILITY:
                    ignored += 1
                    continue
            elif item.identifier is not None and item.identifier != "kernel":
                ignored += 1
                continue
            if item.device is not None or self._pending:  # attributed by the record, or a look-ahead waits
                self.feed_into(item, out)
                plans = self._plans
                continue
            text = item.text
            plan = plans.get(text)
            if plan is None:
                plan = self._plan(text)
                plans = self._plans
            self._index += 1
            code, gpu, match, device, cls, severity, message, count, key, key_any, classes = plan
            if gpu is not None:
                seen_add(gpu)
            if code == _ANCHOR:  # what _apply does for it, every field known but the record's
                mono = item.monotonic_seconds
                anchor = (cls, mono, self._index)
                last_anchor[device] = last_anchor[""] = anchor
                last_of_class[key] = last_of_class[key_any] = anchor
                append(event(item.line, cls, device, severity, message, mono, count, item.seq, item.wall_time))
                if cls in _RESET_MARKS:
                    self._mark_reset(cls, device, mono)
            elif code == _DETAIL:
                found = last_anchor.get(device)
                if found is None or found[0] not in classes:
                    self.orphan_details += 1
            elif code == _TRAP:
                self.traps += 1
            elif code == _GENERAL:
                assert match is not None
                self._apply(item, match, out)
        if unseen:
            self._see_gpus_of(unseen)
        return read, ignored

    def _see_gpus_of(self, runs: list[SkippedRecords]) -> None:
        """The GPUs the amdgpu prefixes of ``runs`` name, as ``skip`` learns them: one look over each chunk's
        span of them first, and run by run only when it names a GPU not seen yet."""
        seen = self._seen_gpus
        spans: dict[int, tuple[bytes, int, int]] = {}
        for run in runs:
            span = spans.get(id(run.data))
            spans[id(run.data)] = (run.data, run.start, run.end) if span is None else (span[0], span[1], run.end)
        if all(amdgpu_prefixes(data, begin, end) <= seen for data, begin, end in spans.values()):
            return
        for run in runs:
            seen.update(run.amdgpu_devices(seen))

    def _apply(self, record: KernelRecord, match: LineMatch, out: list[KernelEvent]) -> None:
        """What a detail, anchor or followup line does (its GPU already seen)."""
        parts = match.parts
        kind = match.kind
        if kind == "detail":
            key = self._device(record, parts) or ""
            anchor = self._last_anchor.get(key) or (self._last_anchor.get("") if key == "" else None)
            if anchor is None or anchor[0] not in match.detail_classes:
                self.orphan_details += 1
            return
        rule = match.rule
        assert rule is not None
        if rule.attribution == "aer_source":
            src = match.source_bdf
            gpu = src if src in self._gpus() else self._aer_ports.get(src or "")
            if gpu is None:
                self.aer_not_gpu += 1
                return
            device: str | None = gpu
        else:  # _device(), but for a text naming a device in its message
            device = record.device or parts.bdf or match.device_bdf
            if device is None:
                gpus = self._known or self._seen_gpus
                device = next(iter(gpus)) if len(gpus) == 1 else None
        if kind == "followup":
            key = device or ""
            prior = self._last_of_class.get((rule.event_class, key))
            if prior is not None and self._within(prior, record, rule.followup_seconds):
                return  # restates the event just counted
        if device is None and rule.event_class in BY_OPEN_RESET:
            device = self._only_open_reset(record)
        if device is None and rule.lookahead_class is not None:
            self._pending.append(_Pending(self._event(record, match, rule, UNKNOWN_DEVICE), rule, self._index))
            self._remember("", rule.event_class, record)
            return
        if device is not None and self._pending:
            out.extend(self._resolve(rule.event_class, device))
        self._remember(device or "", rule.event_class, record)
        out.append(self._event(record, match, rule, device or UNKNOWN_DEVICE))
        if device is not None and rule.event_class in _RESET_MARKS:
            self._mark_reset(rule.event_class, device, record.monotonic_seconds)

    def _mark_reset(self, event_class: str, device: str, monotonic: float | None) -> None:
        if event_class == RESET_OPENS:
            self._open_resets[device] = monotonic
        else:
            self._open_resets.pop(device, None)

    def _only_open_reset(self, record: KernelRecord) -> str | None:
        """The GPU whose reset is the only one open at ``record`` (resets that lost their end closed first)."""
        now = record.monotonic_seconds
        if now is not None:
            for gpu, began in list(self._open_resets.items()):
                # an older boot's reset (the kernel clock went back) or one whose end never came
                if began is not None and not 0 <= now - began <= RESET_OPEN_MAX_SECONDS:
                    del self._open_resets[gpu]
        if len(self._open_resets) != 1:
            return None
        return next(iter(self._open_resets))

    def open_resets(self) -> tuple[tuple[str, float | None], ...]:
        """The GPUs whose reset sequence is open, with the kernel time it began (persisted with the cursor)."""
        return tuple(sorted(self._open_resets.items()))

    def restore_open_resets(self, resets: Iterable[tuple[str, float | None]]) -> None:
        for gpu, began in resets:
            bdf = normalize_bdf(gpu)
            if bdf is not None:
                self._open_resets[bdf] = began

    def skip(self, records: SkippedRecords) -> list[KernelEvent]:
        """Records in which no rule literal occurs: what ``feed`` would do with each, without classifying them.

        They advance the record count (the windows of logs without timestamps) and name GPUs; while a
        look-ahead waits they go through ``feed`` one by one, since their timestamps can expire it.
        """
        if self._pending:
            out: list[KernelEvent] = []
            for record in records.records():
                out.extend(self.feed(record))
            return out
        self._index += records.count
        self._seen_gpus.update(records.amdgpu_devices(self._seen_gpus))
        return []

    def _resolve(self, event_class: str, device: str) -> list[KernelEvent]:
        for i, p in enumerate(self._pending):
            if p.rule.lookahead_class == event_class:
                del self._pending[i]
                return [replace(p.event, pci_bus=device)]  # oldest first: the GPU that timed out resets first
        return []

    def expire(self, now_monotonic: float | None = None) -> list[KernelEvent]:
        """One tick of a live source: give up on lookaheads whose window has passed (they go to ``unknown``)."""
        out: list[KernelEvent] = []
        keep: list[_Pending] = []
        for p in self._pending:
            p.ticks += 1
            mono = p.event.monotonic_seconds
            late = now_monotonic is not None and mono is not None and now_monotonic - mono > p.rule.lookahead_seconds
            if late or p.ticks >= self.MAX_PENDING_TICKS:
                out.append(p.event)
            else:
                keep.append(p)
        self._pending = keep
        return out

    def flush(self) -> list[KernelEvent]:
        """End of input: every pending lookahead goes to ``unknown``."""
        out = [p.event for p in self._pending]
        self._pending = []
        return out

    def pending(self) -> tuple[tuple[KernelEvent, str], ...]:
        """Events waiting for their lookahead, with their class's rule name (persisted across restarts)."""
        return tuple((p.event, p.rule.event_class) for p in self._pending)

    def restore_pending(self, events: Iterable[KernelEvent]) -> None:
        by_class = {r.event_class: r for r in self.rules.rules}
        for event in events:
            rule = by_class.get(event.event_class)
            if rule is not None and rule.lookahead_class is not None:
                self._pending.append(_Pending(event, rule, self._index))


def kernel_log_report(
    text: str, rules: KernelRules | None = None, known_gpus: Iterable[str] | None = None
) -> dict[str, object]:
    """The contract's ``parse kernel-log`` JSON for a captured log (events, counts, plus format and warnings).

    Without ``known_gpus``, the GPUs are the amdgpu devices the log itself names (contract section 2).
    """
    rules = rules if rules is not None else default_rules()
    parsed = parse_kernel_log_items(text, rules.line_scanner())
    items = [i for i in parsed.items if isinstance(i, SkippedRecords) or i.is_kernel]
    if known_gpus is None:
        gpus: set[str] = set()
        for item in items:
            if isinstance(item, SkippedRecords):
                gpus.update(item.amdgpu_devices(gpus))
            else:
                gpu = amdgpu_device(item.text)  # only dev_printk lines of amdgpu name a GPU
                if gpu is not None:
                    gpus.add(gpu)
        known_gpus = gpus
    classifier = KernelClassifier(rules, known_gpus)
    events: list[KernelEvent] = []
    classifier.feed_many(items, events)
    events.extend(classifier.flush())
    events.sort(key=lambda e: e.line)
    counts: dict[str, dict[str, int]] = {}
    for event in events:
        per_bus = counts.setdefault(event.pci_bus, {})
        per_bus[event.event_class] = per_bus.get(event.event_class, 0) + event.count
    warnings = list(parsed.warnings)
    ignored = len(parsed.items) - len(items)
    if ignored:
        warnings.append(f"{ignored} records not from the kernel (user space) ignored")
    if classifier.orphan_details:
        warnings.append(f"{classifier.orphan_details} detail lines without their event's first line ignored")
    return {
        "format": parsed.format,
        "events": [e.to_json() for e in events],
        "counts": {bus: dict(sorted(c.items())) for bus, c in sorted(counts.items())},
        "warnings": warnings,
    }
