"""rocm-smi / amd-smi sources against stub tools that print the real captures, as real subprocesses."""

from __future__ import annotations

from pathlib import Path

import pytest
from msgspec.structs import replace
from paths import DATA, FIXTURES
from stubs import Stub, amd_smi_stub, make_stub, rocm_smi_stub

from exporter.config import Config
from exporter.model.smi import SmiReport
from exporter.sources import SourceError
from exporter.sources.smi import AmdSmiSource, AutoSmiSource, RocmSmiSource

MI100 = FIXTURES / "smi" / "rocm-smi" / "telegraf-mi100_rocm571.json"
AMD_LIST = FIXTURES / "smi" / "amd-smi" / "amdsmi-changelog-rocm630_list_text_2gpu-uuid-redacted.txt"
AMD_TOPO = FIXTURES / "smi" / "amd-smi" / "amdsmi-changelog-rocm611_topology-a-t_json_2gpu-pcie.json"
AMD_PROC = FIXTURES / "smi" / "amd-smi" / "amdsmi-changelog-rocm620_process_text_sudo.txt"
AMD_MEM = DATA / "amd-smi" / "metric-mem-usage_json_value-unit_2gpu.json"


def config_for(tmp_path: Path, **kw: object) -> Config:
    return replace(
        Config(),
        rocm_smi_path=str(tmp_path / "rocm-smi"),
        amd_smi_path=str(tmp_path / "amd-smi"),
        smi_timeout_seconds=2.0,
        **kw,
    )


def test_rocm_smi_one_invocation_with_json(tmp_path: Path) -> None:
    stub = rocm_smi_stub(tmp_path, MI100)
    source = RocmSmiSource(config_for(tmp_path))
    report = source.collect()
    assert report.tool == "rocm-smi" and report.format == "json"
    assert len(report.gpus) == 6
    assert report.gpus[0].pci_bus == "0000:1e:00.0"
    source.collect()
    calls = stub.calls()
    assert calls[0] == "--help"  # probed once
    assert calls[1:] == [calls[1]] * 2
    for flag in ("--showmeminfo vram", "--showpids", "--showbus", "--showtopo", "--showproductname", "--json"):
        assert flag in calls[1]


def test_rocm_smi_without_json_support_asks_for_text(tmp_path: Path) -> None:
    stub = make_stub(tmp_path, "rocm-smi")
    stub.set("--help", stdout_file=DATA / "stubs" / "rocm-smi-help-no-json.txt")
    stub.set("", stdout="GPU[0]\t\t: PCI Bus: 0000:03:00.0\n")
    source = RocmSmiSource(config_for(tmp_path))
    report = source.collect()
    assert "--json" not in stub.calls()[1]
    assert report.gpus[0].pci_bus == "0000:03:00.0"


@pytest.mark.parametrize(
    ("action", "message"),
    [
        ({"sleep": 30}, "timed out"),
        ({"stdout": "Segmentation fault\n\x00\x01 garbage"}, "unparsable"),
        ({"exit": 1, "stderr": "ERROR: No DRM devices available. Exiting\n"}, "No DRM devices"),
        ({"stdout": "", "stderr": "WARNING: No JSON data to report\n"}, "rocm-smi"),
    ],
)
def test_rocm_smi_failures_are_source_errors(tmp_path: Path, action: dict[str, object], message: str) -> None:
    stub = rocm_smi_stub(tmp_path, MI100)
    stub.set("", **action)
    with pytest.raises(SourceError, match=message):
        RocmSmiSource(config_for(tmp_path)).collect()


def test_missing_tool(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="could not be started"):
        RocmSmiSource(config_for(tmp_path)).collect()


def test_amd_smi_probes_once_and_merges_subcommands(tmp_path: Path) -> None:
    stub = amd_smi_stub(tmp_path, {"list": AMD_LIST, "topology": AMD_TOPO, "process": AMD_PROC, "metric": AMD_MEM})
    stub.set("static", stdout="[]")
    source = AmdSmiSource(config_for(tmp_path))
    report = source.collect()
    assert report.tool == "amd-smi"
    assert [g.pci_bus for g in report.gpus] == ["0000:23:00.0", "0000:26:00.0"]  # from list
    assert report.gpus[0].vram_total_bytes == 196592 * 1024 * 1024  # metric --mem-usage, MiB
    assert report.links and report.links[0].a_pci_bus is not None
    assert any(p.name == "TransferBench" for p in report.processes)
    first_calls = len(stub.calls())
    source.collect()
    second = stub.calls()[first_calls:]
    assert not any("--help" in c for c in second)
    assert second[0] == "list --json"


def test_amd_smi_runs_topology_and_static_again_only_when_list_changes_or_they_are_old(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stub = amd_smi_stub(tmp_path, {"list": AMD_LIST, "topology": AMD_TOPO, "process": AMD_PROC, "metric": AMD_MEM})
    static = (DATA / "amd-smi" / "static_text_numa-bus_2gpu.txt").read_text()  # as for the GPUs list names
    stub.set("static", stdout=static.replace("0000:03:00.0", "0000:23:00.0").replace("0000:83:00.0", "0000:26:00.0"))
    source = AmdSmiSource(config_for(tmp_path))

    def runs() -> tuple[list[str], SmiReport]:
        before = len(stub.calls())
        report = source.collect()
        return [c.split()[0] for c in stub.calls()[before:] if "--help" not in c], report

    first, report = runs()
    assert first == ["list", "metric", "process", "topology", "static"]
    again, same = runs()
    assert again == ["list", "metric", "process"]  # the GPUs are set up as before: the last reports merged in
    assert same == report and same.links and report.gpus[0].numa_node == 0  # static's, kept
    # The GPUs set up again (here: one of them gone): list says something else, so both run again.
    listed = AMD_LIST.read_text()
    one_gpu = listed[: listed.index("GPU: 1")]
    stub.set("list", stdout=one_gpu)
    changed, report = runs()
    assert changed == ["list", "metric", "process", "topology", "static"]
    assert report.gpus[0].pci_bus == "0000:23:00.0" and report != same
    assert runs()[0] == ["list", "metric", "process"]
    monkeypatch.setattr("exporter.sources.smi.SETUP_REFRESH_SECONDS", 0.0)  # old: run again whatever list says
    assert runs()[0] == ["list", "metric", "process", "topology", "static"]
    stub.set("list", stdout="garbage\n")  # list unparsable: nothing says the setup is the same
    monkeypatch.setattr("exporter.sources.smi.SETUP_REFRESH_SECONDS", 600.0)
    assert runs()[0] == ["list", "metric", "process", "topology", "static"]


def test_auto_prefers_amd_smi_and_falls_back_to_rocm_smi(tmp_path: Path) -> None:
    rocm_smi_stub(tmp_path, MI100)
    source = AutoSmiSource(config_for(tmp_path))
    report = source.collect()  # no amd-smi installed
    assert isinstance(report, SmiReport) and report.tool == "rocm-smi"
    assert source.name == "rocm-smi"
    amd_smi_stub(tmp_path, {"list": AMD_LIST})
    assert source.collect().tool == "rocm-smi"  # the choice sticks while the tool works
    fresh = AutoSmiSource(config_for(tmp_path))
    assert fresh.collect().tool == "amd-smi"
    assert fresh.name == "amd-smi"


def full_amd_smi(tmp_path: Path) -> Stub:
    stub = amd_smi_stub(tmp_path, {"list": AMD_LIST, "topology": AMD_TOPO, "process": AMD_PROC, "metric": AMD_MEM})
    stub.set("static", stdout="[]")
    return stub


def test_amd_smi_hung_subcommand_keeps_what_came_before_and_skips_the_rest(tmp_path: Path) -> None:
    stub = full_amd_smi(tmp_path)
    stub.set("process", sleep=30)  # hangs past the 2 s timeout
    source = AmdSmiSource(config_for(tmp_path))
    report = source.collect()
    assert [g.pci_bus for g in report.gpus] == ["0000:23:00.0", "0000:26:00.0"]  # list and metric came first
    assert report.gpus[0].vram_total_bytes == 196592 * 1024 * 1024
    assert any("process --json: timed out" in w and "skipped topology, static" in w for w in report.warnings)
    assert not any(c.startswith("topology") for c in stub.calls() if "--help" not in c)


def test_amd_smi_hung_subcommand_help_leaves_that_subcommand_out(tmp_path: Path) -> None:
    stub = full_amd_smi(tmp_path)
    stub.set("process --help", sleep=30)
    source = AmdSmiSource(config_for(tmp_path))
    report = source.collect()
    assert report.gpus and not report.processes  # probed without `process`, which is then never run
    source.collect()
    runs = [c for c in stub.calls() if "--help" not in c]
    assert not any(c.startswith("process") for c in runs)
    assert sum(c == "--help" for c in stub.calls()) == 1  # the probe ran once


def test_auto_reselects_when_the_chosen_tool_keeps_failing(tmp_path: Path) -> None:
    full_amd_smi(tmp_path)
    rocm_smi_stub(tmp_path, MI100)
    source = AutoSmiSource(config_for(tmp_path))
    assert source.collect().tool == "amd-smi"
    # A wrapper whose real tool is gone: it starts, then fails; not "could not be started".
    broken = make_stub(tmp_path, "amd-smi")
    broken.set("", exit=127, stderr="/opt/rocm/bin/amd-smi: No such file or directory\n")
    for _ in range(2):
        with pytest.raises(SourceError):
            source.collect()
        assert source.name == "amd-smi"
    assert source.collect().tool == "rocm-smi"  # the third failure in a row looks again
    assert source.name == "rocm-smi"
