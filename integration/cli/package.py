"""``twophase package wheel|env``: what a standalone cluster's executors need, from the sources.

Development tooling (run in a checkout; not in the wheel users install, which has no sources to
build from). ``wheel`` builds the twophase wheel users install from a copy of the sources (no
``build/`` or ``*.egg-info`` in the checkout; ``--development`` keeps the development tooling, as
the project's own cluster runs ship it) and writes it with its ``.zip`` copy (for
``--py-files``); ``env`` packs a fresh venv with the wheel and its runtime dependencies, without
pyspark (the cluster's Spark provides it), with venv-pack (:mod:`twophase.integration.packing`).
Both print the spark-submit line that uses the result.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Literal

import click

from twophase.integration.cli.errors import CommandFailed, TwophaseGroup
from twophase.integration.cli.output import emit_json, json_option, progress, show

WHEEL_KEYS = "wheel, py_file, spark_submit."
ENV_KEYS = (
    "archive, size_bytes, unpacked_bytes, python, python_version, wheel, requirements[], constraints, "
    "cached, built_s, spark_submit (the line; driver in client mode: see --help)."
)
MASTER_PLACEHOLDER = "spark://MASTER:7077"
DEVELOPMENT_OPTION = click.option(
    "--development",
    is_flag=True,
    help="Keep the development tooling in the wheel (the flights demo's driver runs from it).",
)


@click.group("package", cls=TwophaseGroup)
def package() -> None:
    """Build what a Spark cluster's executors need: the wheel, or a packed environment."""


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"


@package.command("wheel")
@click.option(
    "-o",
    "--output-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("dist"),
    show_default=True,
    help="Where the wheel and its .zip copy go.",
)
@click.option("--master", default=MASTER_PLACEHOLDER, show_default=True, help="For the printed line.")
@DEVELOPMENT_OPTION
@json_option(WHEEL_KEYS)
def wheel_command(output_dir: Path, master: str, development: bool, as_json: bool) -> None:
    """Build the twophase wheel (cached per state of the sources) without touching the checkout.

    The .zip copy is for --py-files: PySpark puts only .zip/.egg/.jar entries on the executors'
    sys.path. The executors' Python must have the dependencies already (setup.cfg install_requires,
    and the extras of the job's connectors).
    """
    from twophase.integration.packing import shell_line
    from twophase.integration.spark_shipping import ShippingError, build_wheel, py_file

    try:
        with progress("building the wheel from a copy of the sources ...", as_json):
            built = build_wheel(development=development)
    except ShippingError as exc:
        raise CommandFailed(str(exc)) from None
    output_dir.mkdir(parents=True, exist_ok=True)
    wheel = output_dir / built.name
    shutil.copyfile(built, wheel)
    zipped = output_dir / py_file(built).name
    shutil.copyfile(py_file(built), zipped)
    line = shell_line(["spark-submit", "--master", master, "--py-files", str(zipped), "my_pipeline.py"])
    if as_json:
        emit_json({"wheel": str(wheel.resolve()), "py_file": str(zipped.resolve()), "spark_submit": line})
        return
    show(f"wheel: {wheel}", f"for --py-files: {zipped}", "", line)


@package.command("env")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("twophase-env.tar.gz"),
    show_default=True,
    help="The archive to write.",
)
@click.option(
    "--extra",
    "extras",
    multiple=True,
    help="An extra of the wheel to install too (repeatable): that of each connector the job writes "
    "to, or flights. Not spark: the cluster's Spark provides pyspark.",
)
@click.option("--with", "requirements", multiple=True, help="A further pip requirement (repeatable).")
@click.option(
    "-r",
    "--requirements-file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="Further pip requirements, one a line.",
)
@click.option(
    "--constraints",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="pip constraints [default: the checkout's constraints.txt, if any].",
)
@click.option("--no-constraints", is_flag=True, help="Resolve the newest versions in setup.cfg's ranges.")
@click.option("--master", default=MASTER_PLACEHOLDER, show_default=True, help="For the printed line.")
@DEVELOPMENT_OPTION
@json_option(ENV_KEYS)
def env_command(
    output: Path,
    extras: tuple[str, ...],
    requirements: tuple[str, ...],
    requirements_file: Path | None,
    constraints: Path | None,
    no_constraints: bool,
    master: str,
    development: bool,
    as_json: bool,
) -> None:
    """Pack a Python environment for the executors: twophase and its dependencies, no pyspark.

    A fresh venv of this Python gets the wheel (built as `package wheel` does) and its runtime
    dependencies (with the checkout's constraints.txt: the tested versions); venv-pack packs it.
    Cached per sources and requirements. Ship it with --archives ENV#environment and
    spark.pyspark.python=./environment/bin/python. Every host needs this Python at the same path
    (venv-pack links the interpreter; the archive does not carry it).

    The driver runs in client mode: unpack the archive as ./environment where you run
    spark-submit (then the same relative path serves it), or point spark.pyspark.driver.python at
    a Python with twophase installed.
    """
    from twophase.integration.packing import copy_archive, pack_environment, shell_line
    from twophase.integration.spark_shipping import ShippingError

    if "spark" in extras or "connect" in extras:
        raise click.UsageError("the executors take pyspark from the cluster's Spark: leave out --extra spark")
    reqs = list(requirements)
    if requirements_file is not None:
        lines = requirements_file.read_text().splitlines()
        reqs += [ln.split("#", 1)[0].strip() for ln in lines if ln.split("#", 1)[0].strip()]
    cons: Path | Literal["repository"] | None = "repository"
    if no_constraints:
        cons = None
    elif constraints is not None:
        cons = constraints
    try:
        with progress("packing the environment (cached after the first time; ~2 min) ...", as_json):
            env = pack_environment(extras, reqs, constraints=cons, development=development)
    except ShippingError as exc:
        raise CommandFailed(str(exc)) from None
    env = copy_archive(env, output)
    line = shell_line(
        [
            "spark-submit",
            *("--master", master),
            *("--archives", f"{env.archive}#environment"),
            *("--conf", "spark.pyspark.python=./environment/bin/python"),
            "my_pipeline.py",
        ]
    )
    doc: dict[str, Any] = {
        "archive": str(env.archive),
        "size_bytes": env.size_bytes,
        "unpacked_bytes": env.unpacked_bytes,
        "python": env.python,
        "python_version": env.python_version,
        "wheel": str(env.wheel),
        "requirements": list(env.requirements),
        "constraints": str(env.constraints) if env.constraints is not None else None,
        "cached": env.cached,
        "built_s": env.built_s,
        "spark_submit": line,
    }
    if as_json:
        emit_json(doc)
        return
    show(
        f"packed environment: {env.archive} ({_mib(env.size_bytes)}; {_mib(env.unpacked_bytes)} unpacked"
        + (", from the cache)" if env.cached else f", built in {env.built_s:.0f} s)"),
        f"python: {env.python} ({env.python_version}) must exist at this path on every host",
        f"installed: {env.wheel.name} {' '.join(env.requirements)}"
        + (f" (constraints {env.constraints})" if env.constraints else ""),
        "",
        f"mkdir -p environment && tar -xzf {env.archive} -C environment   # the driver's Python",
        line,
    )
