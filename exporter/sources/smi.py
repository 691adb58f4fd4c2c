"""rocm-smi and amd-smi sources: run the tool through the runner, hand the output to the pure parser.

Choice of tool (``--smi.backend``, default ``auto``): amd-smi when it is installed and answers, else
rocm-smi. amd-smi is AMD's supported tool (rocm-smi is in maintenance since ROCm 7.0) and reports which
GPU each process uses; rocm-smi is what older nodes have. ``rocm-smi`` or ``amd-smi`` forces one, ``both``
runs both (their data are merged by PCI address). In ``auto`` the choice is made on the first run, in the
scheduler's thread (never at start-up and never in a scrape), and made again if the chosen tool disappears.

Both tools can exit 0 with nothing useful (rocm-smi forces exit code 0 since ROCm 5.3), so success is judged
from the parsed output: a run that yields no GPU is a failure.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from msgspec.structs import replace

from exporter.config import Config
from exporter.logging import get_logger
from exporter.model import ParseError
from exporter.model.smi import SmiGpu, SmiReport
from exporter.parsers.amd_smi import (
    AmdSmiHelp,
    amd_smi_commands,
    merge_amd_smi_reports,
    parse_amd_smi,
    parse_amd_smi_help,
)
from exporter.parsers.rocm_smi import completeness, parse_rocm_smi, supports_json
from exporter.sources import SourceAbsent, SourceError
from exporter.sources.runner import CommandResult, run

log = get_logger("smi")

Runner = Callable[[Sequence[str], float], CommandResult]

ROCM_SMI_QUERY = (
    "--showmeminfo",
    "vram",
    "--showpids",
    "--showbus",
    "--showtopo",
    "--showproductname",
    "--showuniqueid",
)


def _default_runner(argv: Sequence[str], timeout: float) -> CommandResult:
    return run(argv, timeout)


class ToolNotInstalled(SourceError):
    """The tool's executable does not exist (not installed, or --amd-smi.path / --rocm-smi.path names nothing)."""


def _check_ran(result: CommandResult, tool: str) -> None:
    """Turn a run that produced nothing usable into a SourceError with a clear message."""
    if result.error is not None:
        error = ToolNotInstalled if result.not_found else SourceError
        raise error(f"{tool} could not be started: {result.error}")
    if result.timed_out:
        raise SourceError(f"{tool} timed out after {result.duration_seconds:.1f}s and was killed")
    if result.truncated:
        raise SourceError(f"{tool} printed more than the output cap; output discarded")


def _describe_failure(result: CommandResult, tool: str, detail: str) -> str:
    stderr = result.stderr.strip().splitlines()
    tail = f"; stderr: {stderr[-1][:200]}" if stderr else ""
    return f"{tool} {' '.join(result.argv[1:])}: {detail} (exit {result.returncode}){tail}"


class RocmSmiSource:
    name = "rocm-smi"

    def __init__(self, config: Config, runner: Runner = _default_runner) -> None:
        self._path = config.rocm_smi_path
        self._timeout = config.smi_timeout_seconds
        self._run = runner
        self._json: bool | None = None  # probed once, on the first run

    def _probe(self) -> bool:
        result = self._run((self._path, "--help"), self._timeout)
        _check_ran(result, "rocm-smi")
        use_json = supports_json(result.stdout + result.stderr)
        log.info("tool_probed", source=self.name, json=use_json)
        return use_json

    def collect(self) -> SmiReport:
        if self._json is None:
            self._json = self._probe()
        argv = (self._path, *ROCM_SMI_QUERY, *(("--json",) if self._json else ()))
        result = self._run(argv, self._timeout)
        _check_ran(result, "rocm-smi")
        try:
            report = parse_rocm_smi(result.stdout)
        except ParseError as exc:
            raise SourceError(_describe_failure(result, "rocm-smi", f"unparsable output: {exc}")) from None
        missing = completeness(report)
        if not any(g.pci_bus for g in report.gpus):
            # Without a PCI address nothing can be keyed: as good as no output.
            raise SourceError(_describe_failure(result, "rocm-smi", "no GPU with a PCI address in the output"))
        if missing:
            log.debug("partial_output", source=self.name, missing=missing)
        # rocm-smi logs its WARNING/ERROR lines to stderr: keep them with the report.
        extra = tuple(line.strip() for line in result.stderr.splitlines() if line.strip())
        if extra:
            report = replace(report, warnings=report.warnings + extra)
        return report

    def close(self) -> None:
        return None


# Subcommands whose help is probed once; the parser decides from it what to run (and with which flags).
AMD_SMI_PROBED = ("list", "metric", "process", "topology", "static")

# What ``topology`` (links, hops, weights) and ``static --numa --bus --asic`` print is set when the driver sets the
# GPUs up (a boot, a driver reload, a new partition mode): they run on the first collect, again whenever ``list``
# prints anything else than the last time they ran, and at least every SETUP_REFRESH_SECONDS; in between their
# last reports are merged in. Two of the five runs an interval saved (BENCHMARKS.md, idle cost); on a real node
# ``static`` alone takes seconds.
SETUP_COMMANDS = frozenset({"topology", "static"})
SETUP_REFRESH_SECONDS = 600.0


class AmdSmiSource:
    name = "amd-smi"

    def __init__(self, config: Config, runner: Runner = _default_runner) -> None:
        self._path = config.amd_smi_path
        self._timeout = config.smi_timeout_seconds
        self._run = runner
        self._queries: tuple[tuple[str, ...], ...] | None = None  # probed once, on the first run
        self._unprobed: set[str] = set()  # subcommands whose help hung or could not run: never used
        self._setup: dict[tuple[str, ...], SmiReport] = {}  # SETUP_COMMANDS' last reports
        self._setup_for: tuple[SmiGpu, ...] | None = None  # what ``list`` said when they were run
        self._setup_at = 0.0  # time.monotonic() of that run

    def _help(self, *command: str) -> AmdSmiHelp | None:
        result = self._run((self._path, *command, "--help"), self._timeout)
        if command and (result.timed_out or result.error is not None):
            # One subcommand's help hanging must not fail the probe: that subcommand is left out.
            log.warning("subcommand_probe_failed", source=self.name, command=command[0], timed_out=result.timed_out)
            self._unprobed.add(command[0])
            return None
        _check_ran(result, "amd-smi")
        try:
            return parse_amd_smi_help(result.stdout + result.stderr)
        except ParseError:
            if not command:
                raise SourceError(_describe_failure(result, "amd-smi", "--help is not amd-smi's help")) from None
            return None

    def _probe(self) -> tuple[tuple[str, ...], ...]:
        top = self._help()
        assert top is not None
        self._unprobed = set()
        helps = [top] + [h for c in AMD_SMI_PROBED if c in top.commands and (h := self._help(c)) is not None]
        queries = tuple(q for q in amd_smi_commands(helps) if q[0] not in self._unprobed)
        if not any(q[0] == "list" for q in queries):
            raise SourceError(f"amd-smi {top.version or ''}: its help offers no 'list' subcommand")
        log.info("tool_probed", source=self.name, version=top.version, commands=[" ".join(q) for q in queries])
        return queries

    def collect(self) -> SmiReport:
        if self._queries is None:
            self._queries = self._probe()
        reports: list[SmiReport] = []
        problems: list[str] = []
        for number, query in enumerate(self._queries):
            kept = self._setup.get(query)
            if kept is not None:  # still what the GPUs are set up as (``_keep_setup`` below)
                reports.append(kept)
                continue
            result = self._run((self._path, *query), self._timeout)
            if result.timed_out:
                # A hung subcommand usually means a sick GPU the next ones would hang on too: stop here and
                # keep what the earlier ones said, so one run costs at most one timeout more than it should.
                skipped = [q[0] for q in self._queries[number + 1 :]]
                problems.append(
                    f"amd-smi {' '.join(query)}: timed out after {result.duration_seconds:.1f}s and was killed"
                    + (f"; skipped {', '.join(skipped)}" if skipped else "")
                )
                break
            _check_ran(result, "amd-smi")
            try:
                report = parse_amd_smi(result.stdout)
            except ParseError as exc:
                problems.append(_describe_failure(result, "amd-smi", f"unparsable output: {exc}"))
                if query[0] == "list":
                    self._setup.clear()  # nothing tells whether the GPUs are still set up the same: run them
                continue
            reports.append(report)
            if query[0] == "list":
                self._keep_setup(report.gpus)
            elif query[0] in SETUP_COMMANDS:
                self._setup[query] = report
        if not reports:
            raise SourceError("; ".join(problems))
        report = merge_amd_smi_reports(reports)
        if not any(g.pci_bus for g in report.gpus):
            detail = f" ({'; '.join(problems)})" if problems else ""
            raise SourceError("amd-smi: no GPU with a PCI address in the output" + detail)
        if problems:
            report = replace(report, warnings=report.warnings + tuple(problems))
        return report

    def _keep_setup(self, listed: tuple[SmiGpu, ...]) -> None:
        """Forget the setup commands' reports (they run again in this collect) unless ``list`` printed what it did
        when they ran, and they are younger than SETUP_REFRESH_SECONDS."""
        now = time.monotonic()
        if listed != self._setup_for or now - self._setup_at >= SETUP_REFRESH_SECONDS:
            self._setup.clear()
            self._setup_for, self._setup_at = listed, now

    def close(self) -> None:
        return None


# A chosen tool that fails this many runs in a row (a wrapper whose real tool is gone exits 127 rather than
# failing to start) makes the auto-selection look again.
RESELECT_AFTER_FAILURES = 3


class AutoSmiSource:
    """amd-smi when it is installed and works, else rocm-smi; its ``name`` is the tool in use. When neither works
    the failure is reported under both names, each with its own error (``SourceError.by_source``); once one is
    chosen the other is not in use and has no ``up`` series."""

    names = (AmdSmiSource.name, RocmSmiSource.name)
    absent_label = "smi"  # rocm_watchdog_source_absent{source="smi"} while neither tool is installed

    def __init__(self, config: Config, runner: Runner = _default_runner) -> None:
        self._config = config
        self._runner = runner
        self._candidates = self._fresh()
        self._chosen: AmdSmiSource | RocmSmiSource | None = None
        self._failures = 0
        self._absent = False  # said once when neither tool is installed, again when that changes

    def _fresh(self) -> tuple[AmdSmiSource, RocmSmiSource]:
        """New candidates, so each probes its tool again (it may be back as another version)."""
        return AmdSmiSource(self._config, self._runner), RocmSmiSource(self._config, self._runner)

    @property
    def name(self) -> str:
        # Before a tool is chosen the preferred one; when none works the SourceError names each tool's failure.
        return self._chosen.name if self._chosen is not None else AmdSmiSource.name

    def collect(self) -> SmiReport:
        if self._chosen is not None:
            try:
                report = self._chosen.collect()
            except SourceError as exc:
                self._failures += 1
                if "could not be started" not in str(exc) and self._failures < RESELECT_AFTER_FAILURES:
                    raise
                log.warning("tool_reselecting", source=self._chosen.name, error=str(exc), failures=self._failures)
                self._chosen, self._failures, self._candidates = None, 0, self._fresh()
            else:
                self._failures = 0
                return report
        errors: dict[str, str] = {}
        missing: dict[str, str] = {}
        for candidate in self._candidates:
            try:
                report = candidate.collect()
            except ToolNotInstalled as exc:
                missing[candidate.name] = str(exc)
                continue
            except SourceError as exc:
                errors[candidate.name] = str(exc)
                continue
            self._chosen, self._absent = candidate, False
            log.info("tool_selected", source=candidate.name)
            return report
        if not errors:  # neither is installed: the GPUs are read from sysfs alone, which is no failure
            message = "neither amd-smi nor rocm-smi is installed: GPUs are read from sysfs only"
            if not self._absent:
                log.info("smi_tool_absent", message=message, tried=" | ".join(missing.values()))
            self._absent, self._candidates = True, self._fresh()
            raise SourceAbsent(message, self.absent_label)
        # An installed tool that fails is a failure, under its own name (a missing one has no series).
        self._absent = False
        message = "no working GPU tool: " + " | ".join(
            f"{name}: {error}" for name, error in {**errors, **missing}.items()
        )
        raise SourceError(message, by_source=errors)

    def close(self) -> None:
        return None
