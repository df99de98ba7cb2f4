"""The foundation: the packages import, the CLIs answer --help, the fixtures start real parts."""

from __future__ import annotations

import ast
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import webgym.cli
import webgym_data.cli
import webgym_rl.cli
import webgym_rollout.cli
from tests.conftest import REPO_ROOT

PACKAGES = ("webgym", "webgym_core", "webgym_data", "webgym_sites", "webgym_rollout", "webgym_rl")
CLIS = ("webgym", "webgym-data", "webgym-rollout", "webgym-rl")


def test_packages_import_in_a_fresh_interpreter():
    code = "import webgym_data, webgym_sites, webgym_rollout, webgym_rl, webgym; print('ok')"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_webgym_rl_exports_its_core_api_without_importing_torch():
    code = ("import sys, webgym_rl; assert 'torch' not in sys.modules, 'import webgym_rl imported torch'; "
            "names = [getattr(webgym_rl, n) for n in webgym_rl.__all__]; print(len(names))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) >= 10


@pytest.mark.parametrize("cli", CLIS)
def test_cli_help_shows_an_example_for_the_group_and_every_command(cli):
    exe = Path(sys.executable).with_name(cli)
    result = subprocess.run([str(exe), "--help"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "Example:" in result.stdout
    group = {"webgym": webgym.cli, "webgym-data": webgym_data.cli, "webgym-rollout": webgym_rollout.cli,
             "webgym-rl": webgym_rl.cli}[cli].main
    for command in group.list_commands(click.Context(group)):
        assert command in result.stdout
        sub = subprocess.run([str(exe), command, "--help"], capture_output=True, text=True, check=False)
        assert sub.returncode == 0, f"{cli} {command} --help: {sub.stderr}"
        assert "Example" in sub.stdout, f"{cli} {command} --help has no example"


def _imported_modules(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


@pytest.mark.parametrize("cli", CLIS)
def test_every_command_takes_v_after_its_name(cli):
    group = {"webgym": webgym.cli, "webgym-data": webgym_data.cli, "webgym-rollout": webgym_rollout.cli,
             "webgym-rl": webgym_rl.cli}[cli].main
    for command in group.list_commands(click.Context(group)):
        result = CliRunner().invoke(group, [command, "-v", "--help"], prog_name=cli)
        assert result.exit_code == 0, f"{cli} {command} -v: {result.output}"
        assert "-v, --verbose" in result.output


def test_packages_do_not_import_each_others_private_modules():
    offences = []
    for package in PACKAGES:
        for path in (REPO_ROOT / package).rglob("*.py"):
            for module in _imported_modules(path):
                parts = module.split(".")
                if parts[0] in PACKAGES and parts[0] != package and any(p.startswith("_") for p in parts[1:]):
                    offences.append(f"{path.relative_to(REPO_ROOT)} imports {module}")
    assert offences == []


@pytest.mark.browser
async def test_chromium_fixture_really_renders(chromium, serve_folder, tmp_path):
    (tmp_path / "index.html").write_text(
        "<html><body style='font-size:40px'>"
        "<p id='label'>before</p>"
        "<button id='go' onclick=\"document.getElementById('label').textContent="
        "'after the click'\">go</button>"
        "</body></html>"
    )
    base_url = serve_folder(tmp_path)
    assert base_url.startswith("http://127.0.0.1:")
    context = await chromium.new_context(viewport={"width": 400, "height": 300})
    try:
        page = await context.new_page()
        await page.goto(f"{base_url}/index.html")
        before = await page.screenshot()
        await page.click("#go")
        assert await page.text_content("#label") == "after the click"
        after = await page.screenshot()
    finally:
        await context.close()
    assert before[:8] == b"\x89PNG\r\n\x1a\n"
    assert hashlib.sha256(before).digest() != hashlib.sha256(after).digest()


def test_cli_reference_is_current():
    """docs/reference/cli/ (a page per command) and its mkdocs.yml nav are generated from --help;
    regenerate them with scripts/cli_reference.py."""
    result = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "cli_reference.py"), "--check"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, "docs/reference/cli/ is out of date: " + result.stderr
    reference = REPO_ROOT / "docs" / "reference" / "cli"
    index = (reference / "index.md").read_text(encoding="utf-8")
    assert "## `webgym-rollout`" in index and "(webgym-rl-loop.md)" in index
    loop = (reference / "webgym-rl-loop.md").read_text(encoding="utf-8")
    # loop's flags by the settings they belong to, a section each
    assert "## Policy options (PolicyEndpointSettings)" in loop
    assert "## Training options (OptimizationSettings)" in loop
    fleet = (reference / "webgym-rollout-fleet.md").read_text(encoding="utf-8")
    assert "## `webgym-rollout fleet up`" in fleet
    assert "reference/cli/webgym-rl-loop.md" in (REPO_ROOT / "mkdocs.yml").read_text(encoding="utf-8")


def test_cli_reference_check_names_a_stale_page(tmp_path):
    """--check fails on a page that differs from --help, and names it (here on a copy of the tree)."""
    copy = tmp_path / "repo"
    (copy / "scripts").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "scripts" / "cli_reference.py", copy / "scripts")
    shutil.copy(REPO_ROOT / "mkdocs.yml", copy)
    shutil.copytree(REPO_ROOT / "docs" / "reference" / "cli", copy / "docs" / "reference" / "cli")
    page = copy / "docs" / "reference" / "cli" / "webgym-rl-push.md"
    page.write_text(page.read_text(encoding="utf-8").replace("--revision", "--branch"), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run([sys.executable, str(copy / "scripts" / "cli_reference.py"), "--check"],
                            capture_output=True, text=True, check=False, env=env)
    assert result.returncode == 1 and "webgym-rl-push.md" in result.stderr


def test_a_built_wheel_carries_the_card_templates(tmp_path):
    """`webgym-data build`, `webgym-rollout run` and `webgym-rl push` render cards from templates;
    an installed wheel must hold them (they live in top-level cards/, linked from webgym_core/cards)."""
    import shutil
    import zipfile

    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "setup.cfg"):
        shutil.copy(REPO_ROOT / name, source / name)
    for folder in ("cards", *PACKAGES):
        shutil.copytree(REPO_ROOT / folder, source / folder, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
         "-w", str(tmp_path / "dist"), str(source)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    (wheel,) = (tmp_path / "dist").glob("webgym-*.whl")
    templates = sorted((REPO_ROOT / "cards").glob("*_card.md"))
    assert {p.name for p in templates} == {"tasks_card.md", "trajectories_card.md", "model_card.md",
                                           "sft_card.md"}
    with zipfile.ZipFile(wheel) as archive:
        for template in templates:
            assert archive.read(f"webgym_core/cards/{template.name}") == template.read_bytes()
        names = set(archive.namelist())
    for package in PACKAGES:  # every package is in the wheel, the local sites' too
        assert f"{package}/__init__.py" in names, package


def test_card_templates_are_found_through_the_package():
    from webgym_core.cards import CARDS_DIR
    from webgym_data.build import CARD_TEMPLATE as TASKS_CARD
    from webgym_rl.export import CARD as SFT_CARD
    from webgym_rl.hub import MODEL_CARD

    for template in (TASKS_CARD, CARDS_DIR / "trajectories_card.md", MODEL_CARD, CARDS_DIR / SFT_CARD):
        assert template.parent == CARDS_DIR
        assert template.read_bytes() == (REPO_ROOT / "cards" / template.name).read_bytes()
