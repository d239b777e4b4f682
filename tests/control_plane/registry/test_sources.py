"""Version sources: local paths under the roots (with a checksum), hf:// and s3://, nothing else."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from control_plane.errors import InvalidSource
from control_plane.registry.sources import check_source, local_checksum


@pytest.fixture
def root(tmp_path: Path) -> Path:
    weights = tmp_path / "root" / "smollm2"
    weights.mkdir(parents=True)
    (weights / "config.json").write_text("{}")
    (weights / "model.safetensors").write_bytes(b"\x00" * 10)
    return tmp_path / "root"


@pytest.mark.parametrize("uri", [
    "hf://HuggingFaceTB/SmolLM2-135M-Instruct",
    "hf://org/model@v1.0",
    "s3://my-bucket/models/llama/",
    "s3://my-bucket",
])
def test_remote_addresses_are_accepted_without_checksum(uri: str, root: Path) -> None:
    checked = check_source(uri, [root])
    assert (checked.uri, checked.checksum) == (uri, None)


@pytest.mark.parametrize("uri", [
    "hf://org", "hf://org/../../etc", "hf://org/model/extra", "s3://B/key", "s3://bucket/../x",
])
def test_malformed_remote_addresses_are_refused(uri: str, root: Path) -> None:
    with pytest.raises(InvalidSource, match="is not a valid"):
        check_source(uri, [root])


@pytest.mark.parametrize("uri", [
    "http://example.com/model", "ftp://x/y", "gs://bucket/key", "relative/path", "file:///etc",
])
def test_other_schemes_and_relative_paths_are_refused(uri: str, root: Path) -> None:
    with pytest.raises(InvalidSource, match="is not allowed"):
        check_source(uri, [root])


def test_a_nul_in_a_local_path_is_refused_not_raised(root: Path) -> None:
    with pytest.raises(InvalidSource, match="does not exist or cannot be read"):
        check_source(f"{root}/a\x00b", [root])


def test_local_path_under_a_root_gets_a_content_checksum(root: Path) -> None:
    checked = check_source(str(root / "smollm2"), [root])
    assert checked.uri == str((root / "smollm2").resolve())
    assert checked.checksum == local_checksum(root / "smollm2")
    assert len(checked.checksum) == 64


def test_checksum_changes_with_content_and_file_names(root: Path) -> None:
    before = local_checksum(root / "smollm2")
    (root / "smollm2" / "config.json").write_text('{"a": 1}')
    changed_content = local_checksum(root / "smollm2")
    (root / "smollm2" / "config.json").rename(root / "smollm2" / "other.json")
    assert len({before, changed_content, local_checksum(root / "smollm2")}) == 3


def test_checksum_of_a_single_file(root: Path) -> None:
    file = root / "smollm2" / "model.safetensors"
    expected = hashlib.sha256(b"model.safetensors\0" + b"\x00" * 10 + b"\0").hexdigest()
    assert local_checksum(file) == expected


def test_paths_outside_the_roots_are_refused_even_through_dot_dot_or_symlinks(
        root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "link").symlink_to(outside)
    for path in (outside, root / ".." / "outside", root / "link"):
        with pytest.raises(InvalidSource, match="outside the allowed roots"):
            check_source(str(path), [root])


def test_missing_local_path_is_refused(root: Path) -> None:
    with pytest.raises(InvalidSource, match="does not exist"):
        check_source(str(root / "absent"), [root])


def test_an_unreadable_file_is_refused_naming_it(root: Path) -> None:
    """A model file the control plane cannot read (as in an image whose weights were saved 0600
    for another user) is the caller's to fix: 422 naming the file, not a 500. Run without the
    capabilities that let root read any file (setpriv, from util-linux)."""
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv (util-linux) to drop the file-reading capabilities")
    weights = root / "smollm2" / "model.safetensors"
    weights.chmod(0o000)
    code = ("import sys; from control_plane.errors import InvalidSource; "
            "from control_plane.registry.sources import check_source; from pathlib import "
            "Path\ntry:\n check_source(sys.argv[1], [Path(sys.argv[2])])\n"
            "except InvalidSource as exc:\n print(exc.message)")
    done = subprocess.run(["setpriv", "--bounding-set=-dac_override,-dac_read_search",
                           sys.executable, "-c", code, str(root / "smollm2"), str(root)],
                          capture_output=True, text=True, check=True)
    assert f"cannot read '{weights}' of the source: Permission denied" in done.stdout, done.stderr
    assert "chmod -R a+rX" in done.stdout
