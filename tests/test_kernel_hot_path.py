"""The kernel-log hot path of issue 25: a large chunk's DFA scan finds what the default automaton finds, and the
GPUs named by skipped runs are learnt the same whether the GPUs are known (looked up after the batch) or not."""

from __future__ import annotations

import sys

from paths import PROJECT

sys.path.insert(0, str(PROJECT / "benchmarks"))

import kernel_noise

from exporter.model.kernel import KernelEvent
from exporter.parsers.kernel_log import KernelLogLineParser
from exporter.watchdog import kernel_literals
from exporter.watchdog.kernel_classify import KernelClassifier
from exporter.watchdog.kernel_rules import default_rules

GPUS = ("0000:03:00.0", "0000:43:00.0")


def test_a_large_chunk_is_scanned_by_a_dfa_with_the_same_hits() -> None:
    prefilter = default_rules().prefilter
    assert prefilter is not None
    data = kernel_noise.generate(6_000, GPUS).encode()
    assert len(data) >= kernel_literals.DFA_FROM_BYTES
    small = data[: kernel_literals.DFA_DROP_BELOW - 1]
    assert prefilter.find(small) != []
    assert prefilter._dfa is None
    large = prefilter.find(data)
    assert prefilter._dfa is not None
    pieces: list[int] = []  # the same bytes in pieces the default automaton scans
    pos = 0
    while pos < len(data):
        cut = data.rfind(b"\n", pos, pos + kernel_literals.DFA_DROP_BELOW - 1) + 1
        pieces.extend(pos + hit for hit in prefilter.find(data[pos:cut]))
        pos = cut
    assert prefilter._dfa is None  # dropped at the first small chunk
    assert large == pieces and len(large) > 50


def test_skipped_runs_name_the_same_gpus_known_or_not() -> None:
    rules = default_rules()
    # a third GPU named only by lines without any rule literal
    text = kernel_noise.generate(3_000, GPUS).replace("SMU is initialized", "SMU up", 1)
    text += "[ 9999.000000] amdgpu 0000:c1:00.0: amdgpu: SMU is initialized successfully!\n"
    data = text.encode()
    results = []
    for known in (GPUS, ()):
        parser = KernelLogLineParser()
        items = parser.feed_chunk(data, 1, rules.line_scanner())
        classifier = KernelClassifier(rules, known)
        events: list[KernelEvent] = []
        read, _ignored = classifier.feed_many(items, events)
        results.append((read, classifier._seen_gpus, classifier._index))
    assert results[0] == results[1]
    assert results[0][0] == 3_001
    assert results[0][1] == {*GPUS, "0000:c1:00.0"}
