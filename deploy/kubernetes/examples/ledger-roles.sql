-- The three PostgreSQL roles of the audit ledger, made once by whoever administers the
-- database server, as a superuser:
--
--   psql "$ADMIN_DSN" -v owner_password="$OWNER_PASSWORD" -v writer_password="$WRITER_PASSWORD" \
--     -v operator_password="$OPERATOR_PASSWORD" -f deploy/kubernetes/examples/ledger-roles.sql
--
-- actonce_owner owns the database and its schema: only `actonce audit migrate` (the Job in
-- audit-migrate/) and `actonce audit prune` connect as it. actonce_writer is what every
-- sidecar's DSN names: it may connect and nothing more until the migration grants it what a
-- sidecar needs on the ledger's tables (append events; no UPDATE or DELETE of them).
-- actonce_operator is who people decide as (`actonce audit resolve`, the console): the
-- migration makes it the only role that may append a decision, so that a pod's writer DSN
-- cannot decide another rule's in-doubt step.
\set ON_ERROR_STOP on
CREATE ROLE actonce_owner LOGIN PASSWORD :'owner_password';
CREATE ROLE actonce_writer LOGIN PASSWORD :'writer_password';
CREATE ROLE actonce_operator LOGIN PASSWORD :'operator_password';
CREATE DATABASE actonce_audit OWNER actonce_owner;
REVOKE ALL ON DATABASE actonce_audit FROM PUBLIC;
GRANT CONNECT ON DATABASE actonce_audit TO actonce_writer;
GRANT CONNECT ON DATABASE actonce_audit TO actonce_operator;
\connect actonce_audit
-- Before PostgreSQL 15 every role may create tables in the public schema; the writer must not.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE, CREATE ON SCHEMA public TO actonce_owner;
