# syntax=docker/dockerfile:1
# The Airflow image: the official apache/airflow 3.3.2 (Python 3.11) plus the laketrain library
# (pipeline; not training/, which only the trainer image needs), its DAGs and recipes, with the `airflow` extra (providers docker, cncf-kubernetes,
# amazon, celery). No torch: training runs in the trainer image, started by the DockerOperator
# or the KubernetesPodOperator.
#
#   docker build -f docker/airflow.Dockerfile -t laketrain-airflow:latest .

ARG AIRFLOW_IMAGE=apache/airflow:3.3.2-python3.11
FROM ${AIRFLOW_IMAGE}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# The lock pins every package to what CI tested (pip refuses extras and the CPU torch build in
# a constraints file, so both are dropped: torch is never installed here anyway).
# The build folder is made first, as the image's airflow user, so that pip can build in it.
RUN mkdir -p /tmp/laketrain/src
COPY --chown=airflow:0 requirements.lock /tmp/laketrain/requirements.lock
RUN grep -v '^torch==' /tmp/laketrain/requirements.lock \
      | sed -E 's/^([A-Za-z0-9_.-]+)\[[^]]*\]==/\1==/' > /tmp/laketrain/constraints.txt

COPY --chown=airflow:0 pyproject.toml README.md /tmp/laketrain/src/
COPY --chown=airflow:0 pipeline /tmp/laketrain/src/pipeline
# apache-airflow is named with the image's own version so that pip can never up- or downgrade it
# (the official image's advice); the build then proves that torch did not come along.
RUN pip install --no-cache-dir --constraint /tmp/laketrain/constraints.txt \
        "apache-airflow==${AIRFLOW_VERSION}" "/tmp/laketrain/src[airflow]" \
 && python -c "import importlib.util as u, sys; sys.exit('torch must not be in the Airflow image' if u.find_spec('torch') else 0)" \
 && python -c "import pipeline.settings, airflow.providers.docker, airflow.providers.celery, airflow.providers.cncf.kubernetes, airflow.providers.amazon" \
 && rm -rf /tmp/laketrain

COPY --chown=airflow:0 dags /opt/airflow/dags
COPY --chown=airflow:0 recipes /opt/laketrain/recipes
ENV LAKETRAIN_HOME=/opt/laketrain \
    RECIPES_DIR=/opt/laketrain/recipes
# The official image's airflow user (uid 50000, group 0), by number for runAsNonRoot.
USER 50000
