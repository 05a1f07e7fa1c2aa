"""Per-connector extras (#45 item 4): the core install holds what every job needs, each connector's
client library is the extra its declaration names, a PostgreSQL-only install imports no Kafka,
Delta, Iceberg or boto3 library (checkpoints on s3:// name the s3 extra), and every install line
of the docs names extras that exist.

The PostgreSQL-only run is a fresh interpreter whose import system refuses the other connectors'
libraries (a meta-path finder), as an install without their extras would.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement
from support import build_layout

from twophase.sinks.registry import ConnectorRegistry

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
INSTALL = re.compile(r"twophase\[([^\]]*)\]")


def _requirements(block: str) -> set[str]:
    return {Requirement(line).name for line in (s.strip() for s in block.splitlines()) if line}


def extras() -> dict[str, set[str]]:
    """The wheel's extras (setup.cfg's and each connector declaration's, as setup.py builds them) →
    the distributions each brings."""
    built: dict[str, list[str]] = build_layout.setup_module().extras_require(ROOT)
    return {name: _requirements("\n".join(lines)) for name, lines in built.items()}


def test_each_connectors_extra_exists_and_the_core_holds_none_of_their_libraries() -> None:
    declared = ConnectorRegistry().all()
    known = extras()
    core = _requirements("\n".join(build_layout.setup_module().dependencies(ROOT)))
    for kind, declaration in declared.items():
        assert declaration.extra in known, f"{kind}: the wheel has no extra {declaration.extra!r}"
        assert known[str(declaration.extra)] >= _requirements("\n".join(declaration.requirements))
    only_theirs = {"confluent-kafka", "kafka-python", "deltalake", "psycopg", "pyiceberg", "boto3"}
    assert core & only_theirs == set()
    assert {"pyarrow", "tenacity", "click", "rich"} <= core
    assert "prometheus-client" not in core and known["metrics"] == {"prometheus-client"}
    for kind, declaration in declared.items():  # the development venv runs every connector's tests
        assert known[str(declaration.extra)] <= known["dev"] | core, f"dev lacks the {kind} extra's libraries"


def test_every_install_line_of_the_docs_names_extras_that_exist() -> None:
    known = set(extras())
    wrong = []
    for page in DOCS:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for match in INSTALL.finditer(line):
                named = {e.strip() for e in match.group(1).split(",")}
                if named - known or "" in named:
                    wrong.append(f"{page.relative_to(ROOT)}:{number}: {match.group(0)}")
    assert wrong == []


def test_the_deploy_recipes_name_connector_extras() -> None:
    connector_extras = {str(d.extra) for d in ConnectorRegistry().all().values()}
    for page in sorted((ROOT / "docs" / "deploy").glob("*.md")):
        text = page.read_text(encoding="utf-8")
        named = {e.strip() for m in INSTALL.finditer(text) for e in m.group(1).split(",")}
        assert named & connector_extras, f"{page.name} installs twophase with no connector extra"


BLOCKED = ("confluent_kafka", "kafka", "deltalake", "pyiceberg", "boto3", "botocore", "s3transfer")
POSTGRES_ONLY = f"""
import importlib.abc, json, sys

BLOCKED = {BLOCKED!r}
tried = []

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            tried.append(name)
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())

from click.testing import CliRunner

import twophase
from twophase import Job, PostgresSink, PostgresSinkConfig
from twophase.coordinator.spark.default_source import sink_from_options
from twophase.integration.cli.main import main
from twophase.integration.lingering import list_lingering
from twophase.sinks.errors import MissingExtraError

sink = sink_from_options({{"sink": "postgres", "host": "db", "dbname": "d", "user": "u", "table": "t"}})
names = dir(twophase)
helps = [CliRunner().invoke(main, [c, "--help"]).exit_code for c in ("lingering", "checkpoints")]
chk = ["--checkpoint-dir", sys.argv[1], "--job-id", "j"]
listed = CliRunner().invoke(main, ["checkpoints", "list", *chk, "--json"])
after_postgres = sorted(tried)
development = ("twophase.integration." + p for p in ("jobs", "services", "chaos", "compat", "verify"))
dev_loaded = sorted(m for m in sys.modules if m.startswith(tuple(development)))
top_help = CliRunner().invoke(main, ["--help"])
demo = CliRunner().invoke(main, ["demo"])
errors = {{}}
for kind in ("kafka", "delta", "iceberg"):
    try:
        sink_from_options({{"sink": kind}})
    except MissingExtraError as e:
        errors[kind] = str(e)
try:
    from twophase import KafkaSink
except MissingExtraError as e:
    errors["import"] = str(e)
from twophase.coordinator.storage import open_storage
try:
    open_storage("s3://bucket/checkpoints", "j")
except MissingExtraError as e:
    errors["s3 checkpoints"] = str(e)
s3_chk = ["--checkpoint-dir", "s3://bucket/c", "--job-id", "j"]
s3_listed = CliRunner().invoke(main, ["checkpoints", "list", *s3_chk])
loaded = sorted({{m.split(".")[0] for m in sys.modules}} & set(BLOCKED))
print(json.dumps({{
    "sink": type(sink).__name__, "tried": after_postgres, "errors": errors, "loaded": loaded, "helps": helps,
    "listed": [listed.exit_code, listed.output], "dev_loaded": dev_loaded,
    "top_help": [top_help.exit_code, top_help.output], "demo": [demo.exit_code, demo.output],
    "s3_listed": [s3_listed.exit_code, s3_listed.output],
}}))
"""


def test_a_postgres_only_install_imports_no_kafka_delta_or_iceberg_library(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", POSTGRES_ONLY, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["sink"] == "PostgresSink"
    assert out["tried"] == []  # the data source, the user commands, the lingering tool, dir(twophase)
    assert out["loaded"] == []
    for kind, library in (("kafka", "kafka-python"), ("delta", "deltalake"), ("iceberg", "pyiceberg")):
        assert out["errors"][kind] == (
            f"connector {kind!r} needs {library}, which is not installed where this runs: "
            f"pip install 'twophase[{kind}]' (on the driver and the executors, or the Connect server)"
        )
    assert "pip install 'twophase[kafka]'" in out["errors"]["import"]
    # boto3 is the s3 extra's: checkpoints on s3:// name it, in one line from the CLI too
    s3_line = (
        "S3 checkpoint storage (s3://) needs boto3, which is not installed where this runs: "
        "pip install 'twophase[s3]' (on the driver and the executors, or the Connect server)"
    )
    assert out["errors"]["s3 checkpoints"] == s3_line
    assert out["s3_listed"] == [1, f"Error: {s3_line}\n"]
    assert out["helps"] == [0, 0]
    code, text = out["listed"]
    assert code == 1 and "no job 'j'" in text  # it ran: an empty folder holds no job
    # the user commands stand on the runtime and the connectors: no demo, launcher or chaos runner
    assert out["dev_loaded"] == []
    # the development commands need the flights demo's connectors: listed as unavailable, one line
    code, text = out["top_help"]
    assert code == 0 and re.search(r"demo +\(unavailable here\)", text)
    code, text = out["demo"]
    assert code == 1 and text.strip() == (
        "Error: twophase demo cannot run in this install: connector 'delta' needs deltalake, which is not "
        "installed where this runs: pip install 'twophase[delta]' (on the driver and the executors, or the "
        "Connect server)"
    )


WITHOUT_METRICS = """
import importlib.abc, json, sys

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "prometheus_client":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())

import twophase
from twophase import Job, RuntimeConfig
from twophase.coordinator.run.runtime import JobRuntime
from twophase.sinks.errors import MissingExtraError

RuntimeConfig()
try:
    RuntimeConfig(metrics_port=0)
    error = None
except MissingExtraError as e:
    error = str(e)
print(json.dumps({"error": error, "loaded": "prometheus_client" in sys.modules}))
"""


def test_the_metrics_port_needs_the_metrics_extra_and_nothing_else_imports_it() -> None:
    """#45 W4: prometheus-client is the ``metrics`` extra's, only for ``RuntimeConfig.metrics_port``;
    a job without it imports none of it, and asking for the port without it is one line naming the
    extra, raised where the config is made (before any job exists, so before anything is written)."""
    proc = subprocess.run(
        [sys.executable, "-c", WITHOUT_METRICS], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out == {
        "error": "the metrics endpoint (RuntimeConfig.metrics_port) needs prometheus-client, which is not "
        "installed where this runs: pip install 'twophase[metrics]' (on the driver and the executors, or "
        "the Connect server)",
        "loaded": False,
    }
