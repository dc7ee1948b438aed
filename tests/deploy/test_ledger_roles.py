"""The ledger's three PostgreSQL roles as the manifests use them, on a real server: the roles'
SQL (examples/ledger-roles.sql) run by psql as the README says, the migration Job's command as
the owner, then a sidecar as the writer, its DSN read from a Secret's file."""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from tests.deploy.render import KUBE, container, find, kustomize, pod_of
from tests.harness import free_port
from tests.helpers.env import scrubbed_env
from tests.helpers.health import NeverAnswered, wait_serving
from tests.helpers.postgres import server_dsn

ROLES_SQL = KUBE / "examples" / "ledger-roles.sql"


@dataclass(frozen=True)
class Ledger:
    owner_dsn: str
    writer_dsn: str
    writer: str
    operator_dsn: str
    operator: str


def dsn_as(admin: str, user: str, password: str, database: str) -> str:
    parts = urlsplit(admin)
    netloc = f"{user}:{password}@{parts.hostname}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, f"/{database}", "", ""))


@pytest.fixture
def ledger() -> Iterator[Ledger]:
    """The roles and database of ledger-roles.sql, under names of this test's own: roles
    belong to the whole server, which other tests share."""
    admin = server_dsn()
    suffix = secrets.token_hex(4)
    roles = ("actonce_owner", "actonce_writer", "actonce_operator")
    names = {n: f"{n}_{suffix}" for n in (*roles, "actonce_audit")}
    sql = ROLES_SQL.read_text()
    for name, unique in names.items():
        sql = sql.replace(name, unique)
    passwords = {
        f"{role.removeprefix('actonce_')}_password": secrets.token_hex(8) for role in roles
    }
    variables = [f"--variable={k}={v}" for k, v in passwords.items()]
    try:
        done = subprocess.run(
            ["psql", admin, "--quiet", *variables],
            input=sql,
            text=True,
            capture_output=True,
            timeout=60,
        )
        assert done.returncode == 0, f"ledger-roles.sql failed: {done.stderr}"
        yield Ledger(
            owner_dsn=dsn_as(
                admin, names["actonce_owner"], passwords["owner_password"], names["actonce_audit"]
            ),
            writer_dsn=dsn_as(
                admin, names["actonce_writer"], passwords["writer_password"], names["actonce_audit"]
            ),
            writer=names["actonce_writer"],
            operator_dsn=dsn_as(
                admin,
                names["actonce_operator"],
                passwords["operator_password"],
                names["actonce_audit"],
            ),
            operator=names["actonce_operator"],
        )
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{names["actonce_audit"]}" WITH (FORCE)')
            for role in ("actonce_operator", "actonce_writer", "actonce_owner"):
                conn.execute(f'DROP ROLE IF EXISTS "{names[role]}"')


def dsn_file(folder: Path, dsn: str) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "dsn"
    path.write_text(dsn + "\n")
    return {"ACTONCE_AUDIT_DSN_FILE": str(path)}


def test_the_writer_is_refused_the_schema_until_the_migration_job_ran(
    ledger: Ledger, tmp_path: Path
) -> None:
    # ledger-roles.sql gives the writer a connection and nothing else.
    with (
        psycopg.connect(ledger.writer_dsn) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute("CREATE TABLE intruder (x int)")


def test_the_migration_job_as_owner_lets_the_sidecar_write_as_writer(
    ledger: Ledger, tmp_path: Path
) -> None:
    job = find(kustomize(KUBE / "audit-migrate"), "Job", "actonce-audit-migrate")
    (spec,) = pod_of(job)["containers"]
    ours = {"actonce_writer": ledger.writer, "actonce_operator": ledger.operator}
    command = [ours.get(word, word) for word in spec["command"]]
    assert command[:3] == ["actonce", "audit", "migrate"]
    migrated = subprocess.run(
        [sys.executable, "-m", "sidecar.cli", *command[1:]],
        env=scrubbed_env(dsn_file(tmp_path / "owner", ledger.owner_dsn)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert migrated.returncode == 0, f"`{' '.join(command)}` failed: {migrated.stderr}"
    assert ledger.operator in migrated.stdout, migrated.stdout  # decisions are its alone

    # A sidecar as the writer, its DSN from a file, as the Component mounts it.
    sidecar = container(pod_of(find(kustomize(KUBE / "base"), "Deployment", "agent")), "actonce")
    assert "ACTONCE_AUDIT_DSN_FILE" in {e["name"] for e in sidecar["env"]}
    port = free_port()
    env = dsn_file(tmp_path / "writer", ledger.writer_dsn)
    env |= {"ACTONCE_LISTEN": f"127.0.0.1:{port}", "ACTONCE_DATA_DIR": str(tmp_path / "data")}
    log = tmp_path / "sidecar.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "sidecar.cli", "serve"],
            stdout=out,
            stderr=out,
            env=scrubbed_env(env),
        )
    try:
        try:
            wait_serving(f"127.0.0.1:{port}", process)
        except NeverAnswered as never:
            pytest.fail(f"the writer's sidecar did not serve: {never}: {log.read_text()[-2000:]}")
    finally:
        process.kill()
        process.wait(10)
    # What it may not do: rewrite or remove the fleet's audit.
    with psycopg.connect(ledger.writer_dsn) as conn:
        for statement in ("UPDATE audit_events SET run_id = run_id", "DELETE FROM audit_events"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
            conn.rollback()
    # The prune CronJob's command, as the owner it reads, removes what is old enough.
    prune = find(kustomize(KUBE / "audit-prune"), "CronJob", "actonce-audit-prune")
    (spec,) = pod_of(prune)["containers"]
    script = spec["command"][2].replace("/var/lib/actonce-exports", str(tmp_path / "exports"))
    (tmp_path / "exports").mkdir()
    pruned = subprocess.run(
        ["/bin/sh", "-c", script.replace("exec actonce", f"exec {sys.executable} -m sidecar.cli")],
        env=scrubbed_env(dsn_file(tmp_path / "owner", ledger.owner_dsn)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert pruned.returncode == 0, f"the prune CronJob's command failed: {pruned.stderr}"
    assert len(list((tmp_path / "exports").iterdir())) == 1
