"""Required literals of the kernel-log rule patterns, and the one scan that finds them (the prefilter).

A pattern's *required literals* are strings of which every match contains at least one: ``GPU reset\\(\\d+\\)
failed`` needs ``GPU reset(``; ``^(?:MODE1|MODE2|BACO) reset$`` needs one of ``MODE1 reset``, ``MODE2 reset``,
``BACO reset``. They are derived from the pattern as ``re`` itself parses it (its own parser, so the analysis
reads every construct the way matching does) and are sound by construction: a line that contains none of a
pattern's literals cannot match it. Case-insensitive parts, character classes, repeats that may be absent and
back-references give no literal; a pattern left without a literal of at least ``MIN_LITERAL`` characters is
*unfiltered* and tried on every line (correct, only slower).

The prefilter scans a text once for all literals of all patterns (Aho-Corasick: the cost does not grow with the
number of literals, unlike a regex alternation or a loop of ``in`` tests) and answers which patterns a line can
match at all. A kernel log is mostly lines without any literal; they are never split, parsed or matched.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ahocorasick_rs import AhoCorasick, BytesAhoCorasick, Implementation

# re's own pattern parser (re._parser from Python 3.11, sre_parse before): the analysis walks the same tree the
# matcher is compiled from. Private but stable for decades; a pattern it cannot read is simply unfiltered.
_sre: Any = importlib.import_module("re._parser" if sys.version_info >= (3, 11) else "sre_parse")

MIN_LITERAL = 3  # shorter literals filter almost nothing
_MAX_SET = 64  # alternatives kept while multiplying out a sequence ("(?:a|b)(?:c|d)..." grows fast)
_MAX_LEN = 256
_MAX_COMBINATIONS = 4096  # combinations of literals whose slots a prefilter remembers
# A chunk this large is scanned with a DFA: about twice as fast as the automaton chosen by default for the shipped
# rules' 172 literals (a contiguous NFA: ~265 against ~580 MB/s here), but 2.4 ms to build and 1.6 MB to hold, so
# it is built for the first such chunk (a backlog read at start, a storm) and dropped again at the first chunk
# under DFA_DROP_BELOW (the steady state: a few records a read).
DFA_FROM_BYTES = 256 << 10
DFA_DROP_BELOW = 16 << 10

Literals = frozenset[str]
Score = Callable[[Literals], tuple[int, ...]]


def _default_score(s: Literals) -> tuple[int, ...]:
    """Prefer the set whose shortest member is longest (selective), then fewer members."""
    return (min(map(len, s)) if s else 0, -len(s))


class _Info:
    """What a piece of a pattern can match: ``exact`` every string it matches (when few), ``required`` a set of
    which every match contains one (None: no guarantee)."""

    __slots__ = ("exact", "required")

    def __init__(self, exact: Literals | None, required: Literals | None) -> None:
        self.exact = exact
        self.required = required


_NOTHING = _Info(None, None)
_EMPTY = _Info(frozenset({""}), None)


def _better(a: Literals | None, b: Literals | None, score: Score) -> Literals | None:
    usable = [s for s in (a, b) if s and "" not in s]
    return max(usable, key=score) if usable else None


def _analyse(items: Iterable[tuple[Any, Any]], icase: bool, score: Score) -> _Info:
    """A sequence: multiply out the exact parts while they stay few; each run of them is a required set."""
    run: Literals | None = frozenset({""})
    best: Literals | None = None
    exact_all = True
    for op, av in items:
        info = _item(op, av, icase, score)
        if run is not None and info.exact is not None and len(run) * len(info.exact) <= _MAX_SET:
            joined = frozenset(a + b for a in run for b in info.exact)
            if max(map(len, joined)) <= _MAX_LEN:
                run = joined
                continue
        exact_all = False
        best = _better(best, run, score)
        best = _better(best, info.required, score)
        run = info.exact if info.exact is not None else frozenset({""})
    best = _better(best, run, score)
    return _Info(run if exact_all else None, best)


def _item(op: Any, av: Any, icase: bool, score: Score) -> _Info:
    if op is _sre.LITERAL:
        ch = chr(av)
        # under IGNORECASE a letter also matches other cases (and Unicode folds such as U+212A for "k"): no literal
        return _NOTHING if icase and ch.lower() != ch.upper() else _Info(frozenset({ch}), None)
    if op is _sre.IN:
        chars: set[str] = set()
        for sub_op, sub_av in av:
            if sub_op is _sre.LITERAL and not (icase and chr(sub_av).lower() != chr(sub_av).upper()):
                chars.add(chr(sub_av))
            else:
                return _NOTHING  # a range, a category (\d, \s), a negation: too many strings
        return _Info(frozenset(chars), None) if chars else _NOTHING
    if op is _sre.AT or op is _sre.ASSERT or op is _sre.ASSERT_NOT:
        return _EMPTY  # zero width: a lookaround constrains the line, but the match itself holds nothing
    if op is _sre.SUBPATTERN:
        _group, add_flags, del_flags, sub = av
        sub_icase = (icase or bool(add_flags & re.IGNORECASE)) and not del_flags & re.IGNORECASE
        return _analyse(sub, sub_icase, score)
    if op is _sre.BRANCH:
        infos = [_analyse(alt, icase, score) for alt in av[1]]
        exact: Literals | None = None
        if all(i.exact is not None for i in infos):
            exact = frozenset().union(*(i.exact for i in infos if i.exact is not None))
            if len(exact) > _MAX_SET:
                exact = None
        required: Literals | None = None
        if all(i.required for i in infos):
            required = frozenset().union(*(i.required for i in infos if i.required))
        return _Info(exact, required)
    if op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT) or op is getattr(_sre, "POSSESSIVE_REPEAT", None):
        low, high, sub = av
        info = _analyse(sub, icase, score)
        if low == 0:
            if high == 1 and info.exact is not None:
                return _Info(info.exact | {""}, None)
            return _EMPTY if high == 0 else _Info(None, None)
        if low == high == 1:
            return info
        return _Info(None, info.required or info.exact)  # at least one occurrence: its literals are required
    if op is getattr(_sre, "ATOMIC_GROUP", None):
        return _analyse(av, icase, score)
    return _NOTHING  # ANY, NOT_LITERAL, CATEGORY, GROUPREF, GROUPREF_EXISTS, ...


def literal_sets(pattern: re.Pattern[str], score: Score = _default_score) -> Literals | None:
    """Strings of which every match of ``pattern`` contains one, or None when the analysis finds none."""
    try:
        parsed = _sre.parse(pattern.pattern, pattern.flags)
    except Exception:  # re compiled it, so this cannot happen; a parser change must not stop start-up
        return None
    icase = bool(parsed.state.flags & re.IGNORECASE)
    info = _analyse(parsed.data, icase, score)
    return _better(info.required, info.exact, score)


def required_literals(pattern: re.Pattern[str]) -> Literals | None:
    """The pattern's required literals when every one of them has at least ``MIN_LITERAL`` characters (those
    that contain another one left out: a line with the longer one has the shorter one too)."""
    found = literal_sets(pattern)
    if not found or min(map(len, found)) < MIN_LITERAL:
        return None
    return frozenset(s for s in found if not any(o != s and o in s for o in found))


def declared_literals_cover(pattern: re.Pattern[str], declared: Sequence[str]) -> bool:
    """True when every match of ``pattern`` provably contains one of ``declared`` (a rule's ``literals``)."""
    if not declared or "" in declared:
        return False

    def covered(s: Literals) -> tuple[int, ...]:
        return (all(any(d in lit for d in declared) for lit in s),)

    found = literal_sets(pattern, covered)
    return found is not None and covered(found) == (True,)


def _longest_common_substring(strings: Iterable[str]) -> str:
    first, *rest = sorted(strings, key=len)
    for size in range(len(first), 0, -1):
        for start in range(len(first) - size + 1):
            piece = first[start : start + size]
            if all(piece in s for s in rest):
                return piece
    return ""


def required_literal(pattern: str) -> str | None:
    """One literal every match of ``pattern`` contains (the longest common to its required literals), if it has
    at least ``MIN_LITERAL`` characters."""
    found = literal_sets(re.compile(pattern))
    if not found:
        return None
    common = _longest_common_substring(found)
    return common if len(common) >= MIN_LITERAL else None


class Prefilter:
    """One scan of a text for every required literal, and which patterns (by slot number) a line can match.

    Built from each pattern slot's literals (None: the pattern has none and is tried on every line). The index
    maps each literal to the slots that need it, so a line is tried only against the patterns it can match.
    """

    def __init__(self, slot_literals: Sequence[Literals | None]) -> None:
        keys = sorted({k for lits in slot_literals if lits for k in lits})
        index = {k: i for i, k in enumerate(keys)}
        per_key: list[list[int]] = [[] for _ in keys]
        for slot, lits in enumerate(slot_literals):
            for k in lits or ():
                per_key[index[k]].append(slot)
        self.keys: tuple[str, ...] = tuple(keys)
        self.key_slots: tuple[tuple[int, ...], ...] = tuple(tuple(s) for s in per_key)
        self.unfiltered: tuple[int, ...] = tuple(i for i, lits in enumerate(slot_literals) if lits is None)
        self.complete = not self.unfiltered  # every pattern has literals: a line without any matches nothing
        self._text = AhoCorasick(keys) if keys else None
        # The chunk scan looks at raw lines: a literal with a newline cannot occur in one (and a pattern that
        # needs one cannot match a line). A message decoded from invalid UTF-8 holds U+FFFD where its bytes do
        # not: a literal with it rules the chunk scan out.
        self._line_keys = [k.encode() for k in keys if "\n" not in k]
        self._bytes = BytesAhoCorasick(self._line_keys) if self._line_keys else None
        self._dfa: BytesAhoCorasick | None = None  # the large chunks' automaton, while they come (DFA_FROM_BYTES)
        self.chunk_scan = self.complete and not any("\ufffd" in k for k in keys)
        # The slots of the literals found together in a line, by the literals in the order found (a few dozen)
        self._combinations: dict[tuple[int, ...], tuple[int, ...]] = {}

    def scan(self, text: str) -> list[tuple[int, int, int]]:
        """Every occurrence of a literal in ``text``, overlapping ones too: (key, begin, end)."""
        return self._text.find_matches_as_indexes(text, overlapping=True) if self._text is not None else []

    def slots_in(self, hits: Iterable[tuple[int, int, int]], begin: int, end: int) -> Iterable[int]:
        """The slots a piece ``text[begin:end]`` of a scanned text can match, in slot order: those whose literal
        occurs inside it, and the unfiltered ones."""
        inside = [key for key, first, last in hits if first >= begin and last <= end]
        if not inside:
            return self.unfiltered
        if len(inside) == 1 and not self.unfiltered:
            return self.key_slots[inside[0]]  # the usual case: one literal, its slots already in order
        combination = tuple(inside)
        slots = self._combinations.get(combination)
        if slots is None:
            found = set(self.unfiltered)
            for key in inside:
                found.update(self.key_slots[key])
            slots = tuple(sorted(found))
            if len(self._combinations) < _MAX_COMBINATIONS:
                self._combinations[combination] = slots
        return slots

    def find(self, data: bytes | memoryview) -> list[int]:
        """Offsets in ``data`` where a literal occurs: every line a pattern can match holds one (when
        ``chunk_scan``). The chunk scan of the followed-file reader."""
        automaton = self._bytes
        if automaton is None:
            return []
        size = len(data)
        if size >= DFA_FROM_BYTES:
            if self._dfa is None:
                self._dfa = BytesAhoCorasick(self._line_keys, implementation=Implementation.DFA)
            automaton = self._dfa
        elif size < DFA_DROP_BELOW:
            self._dfa = None
        return [begin for _key, begin, _end in automaton.find_matches_as_indexes(data)]
