"""Where the S3 sink's committer jar is found, and the error when it is not."""

from __future__ import annotations

from pathlib import Path

import pytest

from twophase.connectors.s3 import jvm_jar
from twophase.sinks.errors import ConfigError


def test_the_jar_beside_the_module_s_jvm_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "jvm").mkdir()
    (tmp_path / "jvm" / jvm_jar.JAR_NAME).write_bytes(b"PK")
    monkeypatch.setattr(jvm_jar, "__file__", str(tmp_path / "jvm_jar.py"))
    assert jvm_jar.staging_jar() == str(tmp_path / "jvm" / jvm_jar.JAR_NAME)


def test_a_missing_jar_names_how_to_build_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jvm_jar, "__file__", str(tmp_path / "jvm_jar.py"))
    with pytest.raises(ConfigError, match=r"make jars"):
        jvm_jar.staging_jar()
