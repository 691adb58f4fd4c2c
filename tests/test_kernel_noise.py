"""The throughput benchmark's noise log (benchmarks/kernel_noise.py) is what its docstring says, checked with the
classifier itself: 94 % non-GPU lines matching no rule and saying neither drm, amdgpu nor kfd, at least 20,000
distinct among them; 5 % drm/amdgpu/kfd lines matching no rule; 1 % lines matching a rule; the same bytes on every
run."""

from __future__ import annotations

import sys
from collections import Counter

from paths import PROJECT

sys.path.insert(0, str(PROJECT / "benchmarks"))

import kernel_noise

from exporter.watchdog.kernel_classify import match_message
from exporter.watchdog.kernel_rules import default_rules

GPUS = ("0000:03:00.0", "0000:43:00.0")
WORDS = ("drm", "amdgpu", "kfd")


def test_parts_hold_what_the_generator_says() -> None:
    rules = default_rules()
    lines = kernel_noise.lines(100_000, GPUS)
    parts = Counter(part for part, _msg in lines)
    assert parts == {kernel_noise.NOISE: 94_000, kernel_noise.LOOKALIKE: 5_000, kernel_noise.RULE: 1_000}
    wrong = []
    for part, msg in lines:
        kind = match_message(rules, msg).kind
        says_gpu = any(word in msg for word in WORDS)
        holds = {
            kernel_noise.NOISE: not says_gpu and kind == "none",
            kernel_noise.LOOKALIKE: says_gpu and kind == "none",
            kernel_noise.RULE: kind != "none",
        }[part]
        if not holds:
            wrong.append((part, kind, msg))
    assert wrong == []
    assert len({msg for part, msg in lines if part == kernel_noise.NOISE}) >= 20_000


def test_the_same_log_every_time() -> None:
    first = kernel_noise.generate(5_000, GPUS)
    assert first == kernel_noise.generate(5_000, GPUS)
    assert first.count("\n") == 5_000
    assert first != kernel_noise.generate(5_000, GPUS, seed=kernel_noise.SEED + 1)
