"""What a release is made of: wheels that are the same bytes however often one commit is
built, and an image and wheel builds that install nothing but packages pinned by hash.

The wheels are built by `make`'s own targets (mk/dist.mk), twice, into folders of the test's.
"""

from __future__ import annotations

import calendar
import re
import subprocess
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.deploy.render import REPO

VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
WHEELS = (f"actonce-{VERSION}-py3-none-any.whl", f"actonce_client-{VERSION}-py3-none-any.whl")
PINS = REPO / "requirements"


def _make(*args: str) -> subprocess.CompletedProcess[str]:
    """`make ARGS` in the repository. The virtualenv's stamps are taken as they are: a test
    never reinstalls the shared one."""
    stamps = ["-o", ".venv/.installed", "-o", ".venv/.serve-installed"]
    return subprocess.run(
        ["make", "--no-print-directory", *stamps, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _make_wheels(dist: Path, committed: int) -> list[Path]:
    """The two Python wheels, as `make dist-packages` builds them, into ``dist``, of a commit
    made at ``committed`` (others may commit to the tree between two builds)."""
    targets = [str(dist / name) for name in WHEELS]
    done = _make(f"DIST={dist}", f"COMMIT_TIME={committed}", *targets)
    assert done.returncode == 0, done.stdout + done.stderr
    return [Path(t) for t in targets]


def test_two_builds_of_one_commit_are_the_same_wheels(tmp_path: Path) -> None:
    commit = subprocess.run(
        ["git", "log", "-1", "--format=%ct"], cwd=REPO, capture_output=True, text=True
    )
    committed = int(commit.stdout)
    # The builds are dated by the commit: make says so of each wheel it would build.
    planned = _make(
        "-n", f"DIST={tmp_path / 'plan'}", *(str(tmp_path / "plan" / w) for w in WHEELS)
    )
    dated = re.findall(r"SOURCE_DATE_EPOCH=(\d+) ", planned.stdout)
    assert len(dated) == 2 and abs(int(dated[0]) - committed) < 3600, planned.stdout
    first = _make_wheels(tmp_path / "first", committed)
    second = _make_wheels(tmp_path / "second", committed)
    for one, other in zip(first, second, strict=True):
        assert one.read_bytes() == other.read_bytes(), one.name
    # Every file is dated the commit's time, not the build's.
    for wheel in first:
        with zipfile.ZipFile(wheel) as archive:
            for info in archive.infolist():
                stamped = calendar.timegm((*info.date_time, 0, 0, 0))
                # Zip keeps even seconds; and a time before 1980 is 1980's first.
                assert abs(stamped - committed) <= 2 or info.date_time[0] == 1980, info


def _pins(path: Path) -> dict[str, tuple[str, list[str]]]:
    """A hashed requirements file's pins: name -> (version, hashes). Every requirement in
    it must be NAME==VERSION with at least one sha256."""
    text = re.sub(r"\\\n\s*", " ", path.read_text())  # continuation lines joined
    pins: dict[str, tuple[str, list[str]]] = {}
    for line in text.splitlines():
        line = line.split(" #")[0].strip()
        if not line or line.startswith("#"):
            continue
        requirement, *options = line.split()
        assert not requirement.startswith("-"), f"{path.name}: an option, {line!r}"
        name, equals, version = requirement.partition("==")
        assert equals and re.fullmatch(r"[\w.!+-]+", version), f"{path.name}: {line!r}"
        hashes = [o.removeprefix("--hash=sha256:") for o in options]
        assert hashes and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), line
        pins[str(canonicalize_name(name))] = (version, hashes)
    return pins


def _constraints() -> dict[str, str]:
    pinned = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        name, _, version = line.strip().partition("==")
        if version:
            pinned[str(canonicalize_name(name))] = version
    return pinned


def _closure(requirement: str) -> set[str]:
    """The names of every distribution ``requirement`` brings, as installed here."""
    seen: set[str] = set()
    wanted = [Requirement(requirement)]
    while wanted:
        req = wanted.pop()
        name = str(canonicalize_name(req.name))
        extras = req.extras
        if name in seen and not extras:
            continue
        seen.add(name)
        for text in metadata.requires(req.name) or ():
            dependency = Requirement(text)
            marker = dependency.marker
            if marker is None or any(marker.evaluate({"extra": e}) for e in extras or {""}):
                wanted.append(dependency)
    return seen


def test_the_image_installs_every_package_pinned_by_its_hashes() -> None:
    image = _pins(PINS / "image.txt")
    # Every package the image's sidecar needs, and its build backend; none left to fetch.
    needed = _closure("actonce[all]") - {"actonce"}
    assert needed <= set(image), sorted(needed - set(image))
    backend = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
    assert len(backend) == 1 and "==" in backend[0], "the build backend is pinned"
    name, version = backend[0].split("==")
    assert image[name][0] == version
    # The versions the tests ran with.
    constraints = _constraints()
    differ = {n: (v, constraints[n]) for n, (v, _h) in image.items() if constraints.get(n, v) != v}
    assert differ == {}
    dockerfile = (REPO / "Dockerfile").read_text()
    installs = re.findall(r"pip install ([^\n\\]+)", dockerfile)
    assert installs == [
        "--require-hashes --no-deps -r requirements/image.txt ",
        "--no-deps --no-build-isolation '.[all]' ",
    ]


def test_the_wheels_build_with_the_backend_pinned_by_its_hashes() -> None:
    build = _pins(PINS / "build.txt")
    backend = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
    assert {f"{name}=={version}" for name, (version, _h) in build.items()} == set(backend)
    assert build == {name: pin for name, pin in _pins(PINS / "image.txt").items() if name in build}
    dist = (REPO / "mk" / "dist.mk").read_text()
    assert "--require-hashes --no-deps -r requirements/build.txt" in dist
    assert "--no-build-isolation" in dist and "SOURCE_DATE_EPOCH=$(COMMIT_TIME)" in dist


@pytest.mark.parametrize("name", ["image.txt", "build.txt"])
def test_the_pins_name_no_place_of_this_machine(name: str) -> None:
    text = (PINS / name).read_text()
    assert "file://" not in text and "--find-links" not in text and "--index-url" not in text
