"""Build hook only; the metadata and the core's dependencies live in pyproject.toml ([project]),
setuptools' other options and the non-connector extras in setup.cfg.

The connectors' extras are the exception: each connector's declaration
(``connectors/<name>/declaration.py``) states its extra and that extra's requirements, and
:func:`extras_require` builds them (and adds them to ``dev``) from there, so that adding a connector
means adding its folder alone (#45 item 4).

The wheel's packages follow from the layout: every folder with an ``__init__.py`` under the code
folders, as ``twophase.<folder>``, less the development tooling (:data:`DEVELOPMENT`: the service
launchers, the chaos and compat runners, the flights demo, its verifier and what ships it to a
cluster), which stays in the checkout and runs from there (``pip install -e .`` maps the whole
repository root to ``twophase``). The root package ships ``__init__.py`` alone: this file is no
module of twophase. Test suites and their support live under ``tests/``, outside every package;
the build hook is the second guard that no ``test_*.py`` or ``conftest.py`` reaches the wheel.

The project's own cluster runs ship the development tooling to their Spark drivers and executors
(the flights job runs there): with ``TWOPHASE_WHEEL_DEVELOPMENT=1`` in the environment the wheel
keeps it (:func:`twophase.integration.spark_shipping.build_wheel`). No user-facing build sets it.
"""

import ast
import configparser
import os
import shutil
import subprocess
import tempfile
import warnings
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
CODE_FOLDERS = ("sinks", "coordinator", "connectors", "integration")
DEVELOPMENT = (
    "integration/services",
    "integration/chaos",
    "integration/compat",
    "integration/jobs",
    "integration/docker",
    "integration/cli/flights.py",
    "integration/cli/flights_runs.py",
    "integration/cli/package.py",
    "integration/cli/services.py",
    "integration/packing.py",
    "integration/readback.py",
    "integration/spark.py",
    "integration/spark_shipping.py",
    "integration/verify.py",
)
"""Development tooling (folders and modules, relative to the repository root): never in the wheel
users install."""
DEVELOPMENT_WHEEL_VARIABLE = "TWOPHASE_WHEEL_DEVELOPMENT"
"""Set to ``1``, the wheel keeps :data:`DEVELOPMENT` (the project's own cluster runs only)."""


JVM_PROJECTS = {
    "connectors/s3/jvm": "twophase-s3-staging.jar",
    "connectors/kafka/jvm": "twophase-kafka-staging.jar",
    "connectors/iceberg/jvm": "twophase-iceberg-staging.jar",
}
"""Maven projects whose jar the wheel carries (folder, relative to the repository root → the jar's
name, put in that folder of the wheel): the JVM halves of the sinks' Spark-staged writes."""
MAVEN_SETTINGS = "integration/services/jvm/settings.xml"
"""Maven's global settings for every build of the project (a mirror for Spark's parent POM)."""


DECLARATIONS = "connectors/*/declaration.py"
"""Where the connectors' declarations are (a glob, relative to the repository root)."""


def connector_extras(root: Path = ROOT) -> dict[str, list[str]]:
    """Each connector's extra → its requirements, as the ``extra`` and ``requirements`` keywords of
    the ``DECLARATION = ConnectorDeclaration(...)`` call in each of ``root``'s :data:`DECLARATIONS`
    state them; connectors sharing an extra share its list (each requirement once).

    The declarations are parsed, not imported: in pip's isolated build environment ``twophase`` is
    not importable (it is this folder, mapped by ``package_dir``), and a declaration imports
    ``twophase.sinks.registry``. So both keywords must be literals (``ast.literal_eval``).

    Raises:
        ValueError: a declaration without a ``DECLARATION = ConnectorDeclaration(...)`` call, or
            whose ``extra``/``requirements`` is not a literal.
    """
    extras: dict[str, list[str]] = {}
    for path in sorted(root.glob(DECLARATIONS)):
        call = next(
            (
                node.value
                for node in ast.parse(path.read_text(encoding="utf-8"), str(path)).body
                if isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and any(isinstance(t, ast.Name) and t.id == "DECLARATION" for t in node.targets)
            ),
            None,
        )
        if call is None:
            raise ValueError(f"{path}: no DECLARATION = ConnectorDeclaration(...) to read its extra from")
        keywords = {k.arg: k.value for k in call.keywords if k.arg is not None}
        try:
            extra = ast.literal_eval(keywords["extra"]) if "extra" in keywords else None
            requirements = ast.literal_eval(keywords["requirements"]) if "requirements" in keywords else ()
        except ValueError:
            literal = f"{path}: write extra= and requirements= as literals (setup.py reads them)"
            raise ValueError(literal) from None
        if extra is not None:
            listed = extras.setdefault(str(extra), [])
            listed.extend(str(r) for r in requirements if str(r) not in listed)
    return extras


def extras_require(root: Path = ROOT) -> dict[str, list[str]]:
    """Every extra: the ones ``root/setup.cfg`` lists (Spark, the docs, development...), each
    connector's (:func:`connector_extras`), and ``dev`` with every connector's requirements added
    (the development venv runs every connector's tests).

    Raises:
        ValueError: a connector's extra has the name of one setup.cfg lists.
    """
    cfg = configparser.ConfigParser()
    cfg.read(root / "setup.cfg", encoding="utf-8")
    listed = {
        name: [line.strip() for line in block.splitlines() if line.strip()]
        for name, block in cfg["options.extras_require"].items()
    }
    connectors = connector_extras(root)
    clash = sorted(set(listed) & set(connectors))
    if clash:
        raise ValueError(f"setup.cfg lists the connector extras {clash}; their declarations state them")
    dev = listed.get("dev", [])
    for requirements in connectors.values():
        dev.extend(r for r in requirements if r not in dev)
    return {**listed, **connectors, "dev": dev}


def dependencies(root: Path = ROOT) -> list[str]:
    """The core install's requirements: ``[project] dependencies`` of ``root/pyproject.toml``
    (for the development tooling, on Python 3.11 or later; the build reads them itself)."""
    import tomllib  # here: the build may run on Python 3.10, and never calls this

    with open(root / "pyproject.toml", "rb") as f:
        found: list[str] = tomllib.load(f)["project"]["dependencies"]
    return found


def is_development(relative: str) -> bool:
    """Whether the file or folder ``relative`` (to the repository root, ``/``-separated) is
    development tooling."""
    return any(relative == d or relative.startswith(d + "/") for d in DEVELOPMENT)


def with_development() -> bool:
    """Whether this build keeps the development tooling (:data:`DEVELOPMENT_WHEEL_VARIABLE`)."""
    return os.environ.get(DEVELOPMENT_WHEEL_VARIABLE) == "1"


def product_packages(development: bool = False) -> list[str]:
    """``twophase`` and every package of the code folders; the development packages only when
    ``development``."""
    found = ["twophase"]
    for top in CODE_FOLDERS:
        for init in sorted((ROOT / top).rglob("__init__.py")):
            folder = init.parent.relative_to(ROOT).as_posix()
            if development or not is_development(folder):
                found.append("twophase." + folder.replace("/", "."))
    return found


def build_jar(project: Path, jar: str, dest: Path, root: Path = ROOT) -> bool:
    """Build the Maven ``project`` (a folder with a ``pom.xml``) and copy its ``jar`` to ``dest``;
    False, with a warning, when Maven is not on PATH (the wheel then lacks the jar, and what needs
    it says so by name: :func:`twophase.connectors.s3.staging_jar`).

    Raises:
        subprocess.CalledProcessError: Maven failed.
    """
    mvn = shutil.which("mvn")
    if mvn is None:
        warnings.warn(f"Maven ('mvn') is not on PATH: the wheel is built without {jar}", stacklevel=2)
        return False
    with tempfile.TemporaryDirectory() as out:
        cmd = [mvn, "-q", "-B", "-gs", str(root / MAVEN_SETTINGS), "-f", str(project / "pom.xml")]
        subprocess.run([*cmd, f"-Dtwophase.build={out}", "package"], check=True)
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(out) / jar, dest / jar)
    return True


def build_jars_in_place(root: Path = ROOT) -> None:
    """Build every jar of :data:`JVM_PROJECTS` into its own folder of the checkout (``make jars``;
    ``*.jar`` is never committed), where an editable install finds it.

    Raises:
        RuntimeError: Maven is not on PATH.
        subprocess.CalledProcessError: Maven failed.
    """
    for folder, jar in JVM_PROJECTS.items():
        if not build_jar(root / folder, jar, root / folder, root):
            raise RuntimeError("Maven ('mvn') is not on PATH; install it (e.g. apt install maven)")


class BuildPyProduct(build_py):
    """``build_py`` that leaves out ``test_*.py``, ``conftest.py``, the root's modules other than
    ``__init__.py`` (this file) and, unless asked for, the development modules; and builds the
    jars of :data:`JVM_PROJECTS` into the wheel."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):  # a checkout's jars: `make jars` (build_jars_in_place)
            return
        for folder, jar in JVM_PROJECTS.items():
            build_jar(ROOT / folder, jar, Path(self.build_lib) / "twophase" / folder)

    def find_package_modules(self, package: str, package_dir: str) -> list[tuple[str, str, str]]:
        keep_development = with_development()
        kept = []
        for pkg, module, path in super().find_package_modules(package, package_dir):
            relative = Path(path).resolve().relative_to(ROOT).as_posix()
            if module.startswith("test_") or module == "conftest":
                continue
            if pkg == "twophase" and module != "__init__":
                continue
            if not keep_development and is_development(relative):
                continue
            kept.append((pkg, module, path))
        return kept


if __name__ == "__main__":  # setuptools runs this file as __main__; tests read its constants
    setup(
        packages=product_packages(with_development()),
        # setup.cfg's own [options.extras_require] yields to this (setuptools keeps what setup()
        # was given), which holds it and the connectors' extras
        extras_require=extras_require(),
        cmdclass={"build_py": BuildPyProduct},
    )
