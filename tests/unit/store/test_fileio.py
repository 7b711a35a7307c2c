"""The package's one atomic-write helper: permissions from the umask, all or nothing, locks elsewhere."""

from __future__ import annotations

import ast
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

import pytest_aimeasure
from pytest_aimeasure.store import fileio
from pytest_aimeasure.store.fileio import atomic_write, lock_path

PACKAGE = Path(pytest_aimeasure.__file__).parent


@pytest.fixture
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    mask: int = request.param
    old = os.umask(mask)
    try:
        yield mask
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
@pytest.mark.parametrize("umask", [0o022, 0o027], indirect=True)
def test_a_new_file_gets_the_users_umask(tmp_path: Path, umask: int) -> None:
    atomic_write(tmp_path / "a.json", '{"a": 1}\n')
    atomic_write(tmp_path / "b.bin", b"\x00\x01")
    assert mode(tmp_path / "a.json") == 0o666 & ~umask
    assert mode(tmp_path / "b.bin") == 0o666 & ~umask
    assert (tmp_path / "a.json").read_text() == '{"a": 1}\n'
    assert [p.name for p in sorted(tmp_path.iterdir())] == ["a.json", "b.bin"]  # no temp file left


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
def test_an_existing_file_keeps_its_permissions(tmp_path: Path) -> None:
    target = tmp_path / "baseline.json"
    target.write_text("old\n")
    target.chmod(0o664)
    atomic_write(target, "new\n")
    assert target.read_text() == "new\n" and mode(target) == 0o664


def test_a_failed_write_leaves_the_old_file_intact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "meta.json"
    atomic_write(target, "the old content\n")

    def full_disk(fd: int, data: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fileio.os, "write", full_disk)
    with pytest.raises(OSError, match="No space left"):
        atomic_write(target, "the new content, never whole\n")
    monkeypatch.undo()
    assert target.read_text() == "the old content\n"
    assert [p.name for p in tmp_path.iterdir()] == ["meta.json"]


def test_an_interrupted_replace_leaves_the_old_file_intact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "results.json"
    atomic_write(target, b"old")

    def interrupted(src: object, dst: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(fileio.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, b"new")
    monkeypatch.undo()
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_lock_files_live_outside_the_target_folder_one_per_target(tmp_path: Path) -> None:
    a = lock_path(tmp_path / "aimeasure-baseline.json")
    assert tmp_path not in a.parents and a.parent.is_dir()
    assert a == lock_path(tmp_path / "sub" / ".." / "aimeasure-baseline.json")  # the same file, the same lock
    assert a != lock_path(tmp_path / "other" / "aimeasure-baseline.json")
    assert list(tmp_path.iterdir()) == []


def test_fileio_is_the_ground_floor_and_the_only_writer() -> None:
    """fileio imports nothing of the package, and no other module creates temp files or replaces
    files by hand (the run store's delete is a rename of a folder, sqlite's rebuild a swap)."""
    tree = ast.parse((PACKAGE / "store" / "fileio.py").read_text())
    imported = [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)] + [
        alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    ]
    assert not [name for name in imported if name.startswith("pytest_aimeasure")]
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "fileio.py" or "testing" in path.parts:
            continue
        text = path.read_text()
        for needle in ("mkstemp(", "NamedTemporaryFile(", ".write_text(", ".write_bytes(", "os.replace("):
            if needle in text:
                offenders.append(f"{path.relative_to(PACKAGE)}: {needle}")
    # The run store's writability probe is a temp file it removes at once, not a written file; its
    # delete renames a folder; the cache rebuild swaps in a database sqlite wrote and synced itself.
    assert sorted(offenders) == [
        "store/cache.py: os.replace(",
        "store/runs.py: mkstemp(",
        "store/runs.py: os.replace(",
    ]
