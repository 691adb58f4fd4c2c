"""The README as a newcomer reads it on a fresh clone: no path outside the repository, every flag in the flag table,
the Debian packages the test command installs, prepare-state's capabilities as the manifests have them, the HTTP
server's internals in RELIABILITY.md, and the image steps (the overlay's `images:` block renders with the real
kustomize onto the image the README says to build)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml
from kustomize import KUBERNETES, kubectl
from paths import PROJECT

from exporter.cli import _long_flags, _subparsers, build_parser

README = (PROJECT / "README.md").read_text()
RELIABILITY = (PROJECT / "RELIABILITY.md").read_text()


def section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end > 0 else None]


def test_no_path_outside_the_repository() -> None:
    # no ../shared or other sibling of the checkout (the overlay the README has you write beside it names the checkout)
    assert "../" not in README.replace("../rocm-watchdog/deploy/", ""), "a path outside the repository"
    assert "/work/" not in README
    for link in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README):
        if not link.startswith(("http://", "https://")):
            assert (PROJECT / link).exists(), f"the README links {link}, which is not in the repository"


def flag_table() -> str:
    rows = [line for line in README.splitlines() if line.startswith("| `--")]
    assert len(rows) > 20
    return "\n".join(rows)


def test_every_flag_of_every_command_is_in_the_flag_table() -> None:
    table = flag_table()
    listed = set(re.findall(r"`(--[a-z0-9.<>-]+)`", table))
    collector_row = next(row for row in table.splitlines() if row.startswith("| `--collector.<name>`,"))
    collectors = set(re.findall(r"`([a-z-]+)`", collector_row))
    missing = []
    for command, parser in _subparsers(build_parser()).items():
        for flag in sorted(_long_flags(parser) - {"--help"}):
            generic = re.sub(r"^--(no-)?collector\.([a-z-]+?)(\.interval)?$", r"--\1collector.<name>\3", flag)
            name = re.sub(r"^--(no-)?collector\.([a-z-]+?)(\.interval)?$", r"\2", flag)
            if flag in listed or (generic != flag and generic in listed and name in collectors):
                continue
            missing.append(f"{command} {flag}")
    assert not missing, f"flags missing from the README's flag table: {missing}"


def test_the_test_commands_packages_are_all_named() -> None:
    script = (PROJECT / "scripts" / "test").read_text()
    packages = set(re.findall(r"need\+=\(([a-z0-9-]+)\)", script))
    assert {"npm", "python3-venv", "nodejs", "prometheus"} <= packages
    setup = section("Set up")
    for package in packages:
        assert f"`{package}`" in setup, f"scripts/test installs {package}; the README's Set up does not say so"
    assert "python3-venv" in setup.split("**`scripts/test`**")[0]  # scripts/install's check says it too


def test_prepare_states_capabilities_are_the_manifests() -> None:
    daemonset = yaml.safe_load((KUBERNETES / "base" / "daemonset.yaml").read_text())
    (prepare,) = [c for c in daemonset["spec"]["template"]["spec"]["initContainers"] if c["name"] == "prepare-state"]
    added = prepare["securityContext"]["capabilities"]["add"]
    assert added == ["CHOWN", "FOWNER"]
    deploy = section("Deploy")
    assert "CAP_CHOWN only" not in README and "CHOWN and FOWNER" in deploy
    assert "CAP_CHOWN only" not in build_parser().format_help()


def test_the_http_servers_internals_are_in_reliability() -> None:
    for detail in ("listen backlog of 1024", "remembered as an HMAC", "curve_preferences", "4 worker threads"):
        assert detail not in README, detail
        assert detail in RELIABILITY, detail
    assert "RELIABILITY.md#the-http-server" in README and "\n## The HTTP server\n" in RELIABILITY


def test_the_overlay_of_the_image_steps_renders_onto_the_pushed_image(tmp_path: Path) -> None:
    """The README's overlay, beside a checkout, rewrites every container of the manifests' default image."""
    base = yaml.safe_load((KUBERNETES / "base" / "kustomization.yaml").read_text())
    (image,) = base["images"]
    default = f"{image['newName']}:{image['newTag']}"
    deploy = section("Deploy")
    assert f"`{default}`" in deploy
    build = re.search(r"docker build -t (\S+) ", deploy)
    assert build is not None and f"docker push {build.group(1)}" in deploy
    block = re.search(r"```yaml\n(# my-overlay/kustomization\.yaml.*?)```", deploy, re.S)
    assert block is not None
    overlay = yaml.safe_load(block.group(1))
    assert overlay["images"][0]["name"] == image["newName"]
    # the checkout beside the overlay, as the README lays it out
    (tmp_path / "rocm-watchdog").symlink_to(PROJECT)
    (tmp_path / "my-overlay").mkdir()
    (tmp_path / "my-overlay" / "kustomization.yaml").write_text(block.group(1))
    proc = subprocess.run(
        [kubectl(), "kustomize", str(tmp_path / "my-overlay")], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    pods = [
        doc["spec"]["template"]["spec"] for doc in yaml.safe_load_all(proc.stdout) if doc and doc["kind"] == "DaemonSet"
    ]
    images = {c["image"] for pod in pods for c in pod["containers"] + pod.get("initContainers", [])}
    assert images == {f"{build.group(1)}"}, images
