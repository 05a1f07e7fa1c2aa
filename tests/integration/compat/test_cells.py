"""`make compat`'s cells and table: the floor's pins, the jar set per Spark release, and a partial
run that keeps the rows of the cells it did not run."""

from __future__ import annotations

from pathlib import Path

import pytest

from twophase.integration.compat.cells import CELLS, SourceBuild, find_python, floor_constraints
from twophase.integration.compat.run import CellResult, _run, existing_rows, markdown, source_wheels
from twophase.integration.services.versions import SPARK_JARS, spark_jar_set
from twophase.integration.spark_shipping import worker_requirements


def test_the_floor_pins_every_lower_bound_pandas_included_and_numpy_1() -> None:
    pins = floor_constraints(worker_requirements())
    assert {"pyarrow==14.0.1", "pandas==1.5.3", "tenacity==8.2.2", "click==8.0.4"} <= set(pins)
    assert "numpy<2" in pins  # pyarrow 14 and pandas 1.5 are built against NumPy 1
    assert not any(p.startswith("pyspark") for p in pins)


def test_spark_3_5_0_to_3_5_2_read_delta_with_delta_3_2() -> None:
    for release in ((3, 5, 0), (3, 5, 1), (3, 5, 2)):
        jars = spark_jar_set(release)
        assert jars is not None and (jars.delta_artifact, jars.delta_version) == ("delta-spark_2.12", "3.2.0")
        assert jars.kafka_source == "3.5.7"
    assert spark_jar_set((3, 5, 3)) == spark_jar_set((3, 5, 7)) == SPARK_JARS[(3, 5)]
    assert spark_jar_set((4, 2, 0)) == SPARK_JARS[(4, 2)]
    assert spark_jar_set((5, 0, 0)) is None


def _result(name: str, passed: int) -> CellResult:
    cell = next(c for c in CELLS if c.name == name)
    return CellResult(cell, python=cell.python, versions={"pyspark": cell.spark}, passed=passed)


def test_a_partial_run_keeps_the_rows_of_the_cells_it_did_not_run() -> None:
    first = markdown([_result("spark4.2.0-py3.11", 11), _result("databricks15.4", 14)], 60.0, (1.0, 1.0))
    rerun = _result("spark3.5.0-py3.11-floor", 14)
    second = markdown([rerun], 60.0, (1.0, 1.0), existing_rows(first))
    main, platforms = existing_rows(second)
    assert list(main) == ["spark4.2.0-py3.11", "spark3.5.0-py3.11-floor"]
    assert main["spark4.2.0-py3.11"] == existing_rows(first)[0]["spark4.2.0-py3.11"]
    assert list(platforms) == ["databricks15.4"]
    assert "[Databricks 15.4 LTS](https://docs.databricks.com/" in platforms["databricks15.4"]
    # a rerun replaces its own row in place
    third = markdown([_result("spark4.2.0-py3.11", 9)], 60.0, (1.0, 1.0), existing_rows(second))
    assert list(existing_rows(third)[0]) == ["spark4.2.0-py3.11", "spark3.5.0-py3.11-floor"]
    assert "| 9 | 0 | 0 |" in existing_rows(third)[0]["spark4.2.0-py3.11"]


def test_a_partial_run_keeps_the_records_written_below_the_tables() -> None:
    # a --cells run on 2026-12-03 rewrote COMPAT.md from its tables alone and dropped the sections
    # recording earlier runs (what each cell established, and what it did not)
    first = markdown([_result("spark4.2.0-py3.11", 11), _result("databricks15.4", 14)], 60.0, (1.0, 1.0))
    records = "### Cells run on 2026-12-03\n\nWhat the cells established.\n"
    earlier = first + "\n" + records
    again = markdown([_result("databricks15.4", 13)], 60.0, (1.0, 1.0), existing_rows(earlier), earlier)
    assert again.endswith("\n\n" + records)
    assert "| 13 | 0 | 0 |" in existing_rows(again)[1]["databricks15.4"]
    assert markdown([], 1.0, (1.0, 1.0), existing_rows(again), again).count(records) == 1


def test_every_platform_cell_cites_its_documentation_and_ships_its_own_spark() -> None:
    platforms = [c for c in CELLS if c.platform is not None]
    assert {"databricks16.4", "glue5.0", "glue5.1", "dataproc2.2"} <= {c.name for c in platforms}
    for cell in platforms:
        assert cell.platform is not None
        assert cell.platform.source.startswith("https://")
        assert f"pyspark=={cell.spark}" in cell.platform.packages
    # Dataproc 2.2's Spark patch release moves with the image: each one named for it runs
    dataproc = {
        c.spark
        for c in platforms
        if c.platform is not None and c.platform.title.startswith("Dataproc 2.2 on")
    }
    assert dataproc == {"3.5.0", "3.5.1", "3.5.3"}


def test_a_platform_pin_the_install_broke_is_named_in_the_row() -> None:
    result = _result("glue5.0", 14)
    line = "aiobotocore 2.13.1 has requirement botocore<1.34.132,>=1.34.70, but you have botocore 1.44.8."
    result.broken = {"aiobotocore": line}
    row = existing_rows(markdown([result], 60.0, (1.0, 1.0)))[1]["glue5.0"]
    assert "breaks aiobotocore's pin (Glue 5.0's aiobotocore 2.13.1 (under s3fs) pins botocore" in row


def test_a_step_past_its_time_is_the_cells_failure_not_the_runs(tmp_path: Path) -> None:
    log = tmp_path / "cell.log"
    code = _run(["sleep", "5"], log, timeout_s=0.5)
    assert code != 0
    assert "timed out after 0.5 s" in log.read_text()


@pytest.fixture
def python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Python 3.11, with the cache of built wheels under ``tmp_path / "cache"``."""
    monkeypatch.setenv("TWOPHASE_CACHE", str(tmp_path / "cache"))
    found = find_python("3.11")
    assert found is not None
    return found


def test_a_package_pypi_has_no_wheel_of_is_built_from_its_sdist_once_and_cached(
    tmp_path: Path, python: Path
) -> None:
    # the databricks16.4 cell's pandas 1.5.3 on CPython 3.12 takes an hour; the same steps on a
    # small sdist show the build, the cache and its reuse for real
    build = SourceBuild("six==1.16.0", ("setuptools<72", "wheel"), "a stand-in for a package without a wheel")
    log = tmp_path / "cell.log"
    wheels = source_wheels((build,), python, "3.11", tmp_path / "scratch", log)
    assert isinstance(wheels, Path), wheels
    (built,) = wheels.glob("*.whl")
    assert built.name.startswith("six-1.16.0-") and wheels == tmp_path / "cache" / "source-wheels" / "py3.11"
    assert "--no-binary six" in log.read_text() and not (tmp_path / "scratch").exists()
    log.write_text("")
    assert source_wheels((build,), python, "3.11", tmp_path / "scratch", log) == wheels
    assert log.read_text() == ""  # the cached wheel serves: nothing built again


def test_a_source_build_that_fails_names_the_package_and_caches_nothing(tmp_path: Path, python: Path) -> None:
    build = SourceBuild("six==0.0.1", ("setuptools<72", "wheel"), "no such release")
    why = source_wheels((build,), python, "3.11", tmp_path / "scratch", tmp_path / "cell.log")
    assert why == "six==0.0.1 did not build from source (see its log)"
    assert not list((tmp_path / "cache" / "source-wheels" / "py3.11").glob("*.whl"))


def test_the_databricks_16_4_cell_builds_its_own_pandas_for_python_3_12() -> None:
    (cell,) = [c for c in CELLS if c.name == "databricks16.4"]
    assert cell.platform is not None and cell.python == "3.12"
    (build,) = cell.platform.source_builds
    assert build.requirement in cell.platform.packages and "numpy==1.26.4" in build.build_requires
