"""The deploy recipes (docs/deploy/) keep the fixes of #45 item 3: each states the platform
releases it supports with their Spark and Python and links the platform documentation it follows,
and the mistakes found by reading that documentation stay out. Facts about the platforms are the
platforms' own (cited on each page); these tests only check that the recipes keep to them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DEPLOY = Path(__file__).resolve().parents[1] / "docs" / "deploy"

PLATFORM_DOCS = {
    "emr.md": "https://docs.aws.amazon.com/emr/",
    "dataproc.md": "https://cloud.google.com/dataproc",
    "glue.md": "https://docs.aws.amazon.com/glue/",
    "databricks.md": "https://docs.databricks.com/",
    "kubernetes.md": "https://spark.apache.org/docs/",
}


def code_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.MULTILINE | re.DOTALL)


@pytest.mark.parametrize("page", sorted(PLATFORM_DOCS))
def test_each_recipe_states_its_releases_and_links_the_platform_documentation(page: str) -> None:
    text = (DEPLOY / page).read_text(encoding="utf-8")
    header = next((line for line in text.splitlines() if line.startswith("|")), "")
    assert "Spark" in header and "Python" in header, f"{page}: its first table names no Spark and Python"
    assert PLATFORM_DOCS[page] in text, f"{page} links no page of {PLATFORM_DOCS[page]}"


def test_the_kubernetes_image_has_a_python_twophase_runs_on() -> None:
    # apache/spark-docker: the Java 11 images (the short `-python3` tag of 3.5) are Ubuntu 20.04,
    # Python 3.8; the Java 17 ones Ubuntu 22.04, Python 3.10
    text = (DEPLOY / "kubernetes.md").read_text(encoding="utf-8")
    lines = [line for block in code_blocks(text, "dockerfile") for line in block.splitlines()]
    images = [line.split()[1] for line in lines if line.startswith("FROM ")]
    assert images, "kubernetes.md has no Dockerfile"
    java11 = r"(apache/)?spark:3\.5\.\d+(-python3|-scala2\.12-java11-python3-ubuntu)?"
    for image in images:
        assert not re.fullmatch(java11, image), f"{image}: a Java 11 image, Python 3.8 (twophase needs 3.10)"


def test_the_kubernetes_operator_gets_its_secrets_without_the_webhook() -> None:
    text = (DEPLOY / "kubernetes.md").read_text(encoding="utf-8")
    for block in code_blocks(text, "yaml"):
        assert "envFrom" not in block, "envFrom needs the operator's webhook: use Spark's secretKeyRef"
        if "kind: SparkApplication" in block:
            assert "secretKeyRef" in block


def test_emr_serverless_sets_the_driver_python_and_packs_the_interpreter() -> None:
    text = (DEPLOY / "emr.md").read_text(encoding="utf-8")
    assert "spark.archives=" in text
    for variable in (
        "spark.emr-serverless.driverEnv.PYSPARK_DRIVER_PYTHON=./environment/bin/python",
        "spark.emr-serverless.driverEnv.PYSPARK_PYTHON=./environment/bin/python",
        "spark.executorEnv.PYSPARK_PYTHON=./environment/bin/python",
    ):
        assert variable in text, f"emr.md's EMR Serverless job does not set {variable}"
    dockerfile = "\n".join(code_blocks(text, "dockerfile"))
    assert "venv" in dockerfile and "--copies" in dockerfile, "a venv of links points at the image's Python"
    assert "--python-prefix /home/hadoop/environment" in dockerfile


def test_dataproc_lists_several_pip_packages_behind_another_delimiter() -> None:
    text = (DEPLOY / "dataproc.md").read_text(encoding="utf-8")
    values = re.findall(r"--properties '([^']*)'", text)
    assert values
    for value in values:
        packages = re.search(r"dataproc:pip\.packages=([^#]*)", value)
        if packages and "," in packages.group(1):
            assert re.match(r"\^(.)\^", value), f"{value!r}: a comma in pip.packages needs gcloud's ^#^"


def test_glue_covers_5_1_and_a_zip_of_wheels() -> None:
    text = (DEPLOY / "glue.md").read_text(encoding="utf-8")
    assert re.search(r"^\| 5\.1 \| 3\.5\.6 \| 3\.11 \|", text, re.MULTILINE)
    assert "--only-binary=:all:" in text and "--python-version 3.11" in text
    assert re.search(r"`--additional-python-modules` \| `s3://[^`]+\.zip`", text)
