"""A release says one version everywhere, and its notes keep up with the schemas.

Every artifact `make dist` builds carries the version of pyproject.toml: the Python
client's, the TypeScript package's and the Java pom's must be the same, and the CHANGELOG
has an entry for it. docs/upgrading.md lists the ledger's schema revisions: a table, an
index or a column that the schema makes and the notes do not name fails here, as does a
store schema version they do not say.
"""

from __future__ import annotations

import json
import re
import tomllib
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from sidecar import version
from sidecar.ledger import schema
from sidecar.refstore import postgres as store_postgres
from sidecar.refstore import sqlite as store_sqlite

ROOT = Path(__file__).resolve().parent.parent
UPGRADING = (ROOT / "docs" / "upgrading.md").read_text()


def _pyproject(path: Path) -> str:
    return str(tomllib.loads(path.read_text())["project"]["version"])


def test_every_artifact_carries_one_version() -> None:
    wanted = _pyproject(ROOT / "pyproject.toml")
    pom = ElementTree.parse(ROOT / "clients" / "java" / "pom.xml").getroot()
    namespace = {"m": "http://maven.apache.org/POM/4.0.0"}
    versions = {
        "the sidecar (installed)": version(),
        "the Python client": _pyproject(ROOT / "clients" / "python" / "pyproject.toml"),
        "the TypeScript client": json.loads(
            (ROOT / "clients" / "typescript" / "package.json").read_text()
        )["version"],
        "the Java client": pom.findtext("m:version", namespaces=namespace),
    }
    assert versions == dict.fromkeys(versions, wanted)


def test_the_changelog_has_an_entry_for_the_version() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(rf"^## {re.escape(version())}$", changelog, re.M), version()


def _ledger_names() -> set[str]:
    ddl = schema.tables("BIGINT") + schema.checkpoints_table("BIGINT")
    ddl += schema.run_rules_table() + schema.schema_table()
    for module in ("sqlite", "pgschema", "liveness"):
        ddl += (ROOT / "sidecar" / "ledger" / f"{module}.py").read_text()
    names = set(re.findall(r"CREATE (?:TABLE|INDEX) IF NOT EXISTS (\w+)\s*(?:\(| ON )", ddl))
    names |= {f"audit_events.{column}" for column, _, _ in schema.ADDED_COLUMNS}
    return names


def test_the_upgrade_notes_name_every_part_of_the_ledger_schema() -> None:
    names = _ledger_names()
    assert {"audit_events", "audit_runs", "audit_checkpoints", "audit_events.scope"} <= names
    missing = sorted(name for name in names if f"`{name}`" not in UPGRADING)
    assert not missing, f"docs/upgrading.md names no {missing}: add its schema revision"


def test_the_upgrade_notes_reach_the_ledger_schema_version() -> None:
    rows = re.findall(r"^\| (\d+) \| ", UPGRADING, re.M)
    assert rows and max(int(row) for row in rows) == schema.SCHEMA_VERSION, rows


def test_the_upgrade_notes_say_the_store_schema_version() -> None:
    assert store_sqlite.SCHEMA_VERSION == store_postgres.SCHEMA_VERSION
    said = rf"schema version {store_sqlite.SCHEMA_VERSION}\s+on\s+both databases"
    assert re.search(said, UPGRADING), said
