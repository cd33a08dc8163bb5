#!/usr/bin/env bash
# Runs once, when the postgres container initialises an empty data folder
# (/docker-entrypoint-initdb.d): creates the laketrain metadata store as its own role and
# database beside the Airflow database, so the two never share tables or credentials.
# The metadata-store tables themselves are created by `laketrain db upgrade` (airflow-init).
set -euo pipefail

: "${LAKETRAIN_DB_NAME:?LAKETRAIN_DB_NAME is not set}"
: "${LAKETRAIN_DB_USER:?LAKETRAIN_DB_USER is not set}"
: "${LAKETRAIN_DB_PASSWORD:?LAKETRAIN_DB_PASSWORD is not set}"

# psql variables (:"name" quotes an identifier, :'name' a literal) keep the values out of the
# SQL text, so no name or password can break or inject into the statements.
psql -v ON_ERROR_STOP=1 --no-psqlrc --username "${POSTGRES_USER:-postgres}" --dbname "${POSTGRES_DB:-postgres}" \
  -v db_name="$LAKETRAIN_DB_NAME" -v db_user="$LAKETRAIN_DB_USER" -v db_password="$LAKETRAIN_DB_PASSWORD" <<'SQL'
CREATE ROLE :"db_user" LOGIN PASSWORD :'db_password';
CREATE DATABASE :"db_name" OWNER :"db_user";
REVOKE ALL ON DATABASE :"db_name" FROM PUBLIC;
SQL
echo "laketrain metadata store: database ${LAKETRAIN_DB_NAME} owned by ${LAKETRAIN_DB_USER}"
