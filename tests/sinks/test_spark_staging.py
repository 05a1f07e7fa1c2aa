"""Where the staged writes' jars are found, and the error when one is not."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from twophase.connectors.iceberg import jvm_jar as iceberg_jar
from twophase.connectors.kafka import jvm_jar as kafka_jar
from twophase.connectors.s3 import jvm_jar as s3_jar
from twophase.sinks.errors import ConfigError


@pytest.mark.parametrize("module", [s3_jar, kafka_jar, iceberg_jar])
def test_the_jar_beside_the_module_s_jvm_folder(
    module: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "jvm").mkdir()
    (tmp_path / "jvm" / module.JAR_NAME).write_bytes(b"PK")
    monkeypatch.setattr(module, "__file__", str(tmp_path / "jvm_jar.py"))
    assert module.staging_jar() == str(tmp_path / "jvm" / module.JAR_NAME)


@pytest.mark.parametrize("module", [s3_jar, kafka_jar, iceberg_jar])
def test_a_missing_jar_names_how_to_build_it(
    module: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(module, "__file__", str(tmp_path / "jvm_jar.py"))
    with pytest.raises(ConfigError, match=r"make jars"):
        module.staging_jar()
