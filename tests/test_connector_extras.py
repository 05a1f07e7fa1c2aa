"""A connector's extra comes from its declaration alone (#45 item 4, D4): setup.py builds each
connector's extra, and adds its requirements to ``dev``, from ``connectors/*/declaration.py``; no
other build input names a connector.

The toy connector is a folder with a declaration, added to a copy of the build inputs (setup.py,
setup.cfg and the connectors' declarations); the build reads that copy as it reads the checkout.
"""

from __future__ import annotations

import configparser
import shutil
from pathlib import Path

import pytest
from support import build_layout

from twophase.sinks.registry import ConnectorRegistry

ROOT = Path(__file__).resolve().parents[1]

TOY_DECLARATION = """
from twophase.sinks.registry import ConnectorDeclaration

DECLARATION = ConnectorDeclaration(
    kind="toy",
    title="Toy",
    package="twophase.connectors.toy",
    config="twophase.connectors.toy.config:ToySinkConfig",
    sink="twophase.connectors.toy.sink:ToySink",
    extra="toy",
    requirements=("toy-client>=1.2,<2", "boto3>=1.35.2,<2"),
    libraries={"toy_client": "toy-client"},
)
"""


@pytest.fixture
def build_inputs(tmp_path: Path) -> Path:
    """A copy of what setup.py reads: itself, setup.cfg and every connector's declaration."""
    for name in ("setup.py", "setup.cfg"):
        shutil.copy(ROOT / name, tmp_path / name)
    for declaration in ROOT.glob("connectors/*/declaration.py"):
        target = tmp_path / declaration.relative_to(ROOT)
        target.parent.mkdir(parents=True)
        shutil.copy(declaration, target)
    return tmp_path


def test_a_toy_connector_folder_gets_its_extra_with_no_other_edit(build_inputs: Path) -> None:
    before = build_layout.setup_module().extras_require(build_inputs)
    folder = build_inputs / "connectors" / "toy"
    folder.mkdir()
    (folder / "declaration.py").write_text(TOY_DECLARATION, encoding="utf-8")
    after = build_layout.setup_module().extras_require(build_inputs)
    assert after["toy"] == ["toy-client>=1.2,<2", "boto3>=1.35.2,<2"]
    assert after["dev"] == [*before["dev"], "toy-client>=1.2,<2"]  # boto3 was there already
    assert {k: v for k, v in after.items() if k not in ("toy", "dev")} == {
        k: v for k, v in before.items() if k != "dev"
    }


def test_the_extras_are_the_declarations_and_setup_cfg_names_no_connector() -> None:
    built = build_layout.setup_module().extras_require(ROOT)
    declared = ConnectorRegistry().all()
    for kind, declaration in declared.items():
        assert built[str(declaration.extra)] == list(declaration.requirements), kind
        assert set(declaration.requirements) <= set(built["dev"]), kind
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg", encoding="utf-8")
    assert not set(cfg["options.extras_require"]) & {str(d.extra) for d in declared.values()}
    assert not set(cfg["options.extras_require"]) & set(declared)


def test_a_declaration_whose_requirements_are_not_literal_is_named(build_inputs: Path) -> None:
    folder = build_inputs / "connectors" / "toy"
    folder.mkdir()
    computed = TOY_DECLARATION.replace('("toy-client>=1.2,<2", "boto3>=1.35.2,<2")', "tuple(REQS)")
    (folder / "declaration.py").write_text(computed, encoding="utf-8")
    with pytest.raises(ValueError, match=r"toy/declaration\.py: write extra= and requirements= as literals"):
        build_layout.setup_module().extras_require(build_inputs)
