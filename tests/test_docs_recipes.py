"""The deploy recipes (docs/deploy/) keep the fixes of #45 item 3: each states the platform
releases it supports with their Spark and Python and links the platform documentation it follows,
and the mistakes found by reading that documentation stay out. Facts about the platforms are the
platforms' own (cited on each page); these tests only check that the recipes keep to them."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

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


# --- the recipes' code blocks, checked as each platform would read them -------------------------

#: The Ubuntu and Python of the official `spark` images, by Spark release and Java, from the
#: Dockerfiles of apache/spark-docker (commit 7f2e1f0, 2026-06): each `<v>/scala2.1x-javaNN-ubuntu`
#: image starts FROM eclipse-temurin, `11-jre-focal` (Ubuntu 20.04) for Java 11 up to Spark 3.5.6,
#: `11-jammy` / `17-jammy` / `21-jammy` (Ubuntu 22.04) otherwise; its `-python3` layer adds Ubuntu's
#: `python3`, 3.8 on 20.04 and 3.10 on 22.04.
SPARK_IMAGE_PYTHON = {
    **{(f"3.5.{p}", "java11"): "3.8" for p in range(7)},
    **{(f"3.5.{p}", "java11"): "3.10" for p in (7, 8)},
    **{(f"3.5.{p}", "java17"): "3.10" for p in range(9)},
    **{(f"4.{m}.{p}", j): "3.10" for m in (0, 1) for p in range(4) for j in ("java17", "java21")},
}
#: Tags of the official image (its `versions.json`): the long form, and the short ones naming Java.
SPARK_TAG = re.compile(
    r"(?:apache/)?spark:(?P<spark>\d+\.\d+\.\d+)-(?:scala2\.1[23]-)?(?P<java>java\d+)-python3(?:-ubuntu)?"
)


def _support_matrix() -> dict[str, tuple[str, str]]:
    """docs/support.md's first table: Spark minor -> (lowest, highest) Python it supports."""
    text = (DEPLOY.parent / "support.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\d+\.\d+) \| (3\.\d+)–(3\.\d+)", text, re.MULTILINE)
    return {spark: (low, high) for spark, low, high in rows}


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def test_the_kubernetes_image_python_is_in_the_support_matrix() -> None:
    text = (DEPLOY / "kubernetes.md").read_text(encoding="utf-8")
    images = [
        line.split()[1]
        for b in code_blocks(text, "dockerfile")
        for line in b.splitlines()
        if line.startswith("FROM ")
    ]
    matrix = _support_matrix()
    assert images and matrix
    for image in images:
        tag = SPARK_TAG.fullmatch(image)
        assert tag, f"{image}: not a tag of the official spark image that names its Java and Python"
        python = SPARK_IMAGE_PYTHON[(tag["spark"], tag["java"])]
        low, high = matrix[tag["spark"].rsplit(".", 1)[0]]
        assert _version(low) <= _version(python) <= _version(high), f"{image} holds Python {python}"


#: What the SparkApplication CRD (kubeflow/spark-operator, charts/spark-operator-chart/crds/
#: sparkoperator.k8s.io_sparkapplications.yaml, v1beta2, chart 2.5.0) requires and enumerates.
CRD_REQUIRED = {"driver", "executor", "mainApplicationFile", "sparkVersion", "type"}
CRD_ENUMS = {
    "type": {"Java", "Python", "Scala", "R"},
    "mode": {"cluster", "client"},
    "pythonVersion": {"2", "3"},
}
#: Fields the operator's mutating webhook applies to the pods (internal/webhook/sparkpod_defaulter.go):
#: without the webhook they are silently dropped.
WEBHOOK_ONLY = {"env", "envFrom", "volumeMounts", "secrets", "configMaps", "sidecars", "initContainers"}


def _spark_applications() -> list[dict[str, Any]]:
    text = (DEPLOY / "kubernetes.md").read_text(encoding="utf-8")
    docs = [yaml.safe_load(block) for block in code_blocks(text, "yaml")]
    return [d for d in docs if isinstance(d, dict) and d.get("kind") == "SparkApplication"]


def test_the_spark_application_is_valid_for_the_operators_crd_without_the_webhook() -> None:
    (app,) = _spark_applications()
    assert app["apiVersion"] == "sparkoperator.k8s.io/v1beta2" and app["metadata"]["name"]
    spec = app["spec"]
    assert spec.keys() >= CRD_REQUIRED, f"missing {sorted(CRD_REQUIRED - spec.keys())}"
    for field, allowed in CRD_ENUMS.items():
        assert spec.get(field, next(iter(allowed))) in allowed, field
    assert spec["restartPolicy"]["type"] in {"Never", "Always", "OnFailure"}
    assert all(isinstance(v, str) for v in spec["sparkConf"].values()), "sparkConf is a map of strings"
    for role in ("driver", "executor"):
        assert not WEBHOOK_ONLY & spec[role].keys(), f"{role} uses a field only the webhook applies"
        for variable in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            secret = spec["sparkConf"].get(f"spark.kubernetes.{role}.secretKeyRef.{variable}", "")
            assert re.fullmatch(r"[a-z0-9.-]+:[A-Za-z0-9._-]+", secret), f"{role} gets no {variable}"


def test_the_spark_application_names_the_spark_of_its_image() -> None:
    text = (DEPLOY / "kubernetes.md").read_text(encoding="utf-8")
    (image,) = [
        line.split()[1]
        for b in code_blocks(text, "dockerfile")
        for line in b.splitlines()
        if line.startswith("FROM ")
    ]
    tag = SPARK_TAG.fullmatch(image)
    assert tag
    (app,) = _spark_applications()
    assert app["spec"]["sparkVersion"] == tag["spark"]


def test_every_json_block_parses() -> None:
    for page in sorted(DEPLOY.glob("*.md")):
        for block in code_blocks(page.read_text(encoding="utf-8"), "json"):
            json.loads(block)


def test_every_shell_block_parses() -> None:
    for page in sorted(DEPLOY.glob("*.md")):
        for block in code_blocks(page.read_text(encoding="utf-8"), "bash"):
            run = subprocess.run(["bash", "-n"], input=block, capture_output=True, text=True, check=False)
            assert run.returncode == 0, f"{page.name}: {run.stderr}"


def test_the_emr_serverless_job_driver_is_json_with_the_three_python_settings() -> None:
    text = (DEPLOY / "emr.md").read_text(encoding="utf-8")
    (command,) = [b for b in code_blocks(text, "bash") if "start-job-run" in b]
    words = shlex.split(command.replace("\\\n", " "))
    driver = json.loads(words[words.index("--job-driver") + 1])
    conf = shlex.split(driver["sparkSubmit"]["sparkSubmitParameters"])
    settings = dict(conf[i + 1].split("=", 1) for i, word in enumerate(conf) if word == "--conf")
    assert settings["spark.archives"].endswith("#environment")
    for key in (
        "spark.emr-serverless.driverEnv.PYSPARK_DRIVER_PYTHON",
        "spark.emr-serverless.driverEnv.PYSPARK_PYTHON",
        "spark.executorEnv.PYSPARK_PYTHON",
    ):
        assert settings[key] == "./environment/bin/python", key


def _gcloud_properties(value: str) -> dict[str, str]:
    """``--properties`` as gcloud splits it (`gcloud topic escaping`): on commas, or on the
    delimiter a leading ``^D^`` names."""
    delimiter = ","
    if escaped := re.match(r"\^(.)\^", value):
        delimiter, value = escaped.group(1), value[escaped.end() :]
    return dict(item.split("=", 1) for item in value.split(delimiter))


def test_dataproc_properties_split_as_gcloud_splits_them() -> None:
    text = (DEPLOY / "dataproc.md").read_text(encoding="utf-8")
    values = [w for b in code_blocks(text, "bash") for w in re.findall(r"--properties '([^']*)'", b)]
    assert values
    for value in values:
        properties = _gcloud_properties(value)
        for key in properties:
            assert re.fullmatch(r"(dataproc|spark|yarn|core|hdfs):[\w.-]+", key), f"{value!r}: {key!r}"
        packages = properties["dataproc:pip.packages"].split(",")
        assert all(re.fullmatch(r"twophase\[\w+\]==[\d.]+", p) for p in packages), packages
