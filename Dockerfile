# The rmq image: broker, name server, `rmq` CLI, Spark connector, PySpark and a Java 17 runtime.
# One image serves every service of docker-compose.yml (servers, Spark master/worker, jobs).
# bookworm: the Debian release that ships openjdk-17. BASE_IMAGE: the official Python image, or
# where no image registry is reachable the one scripts/compose_test.sh builds (docs/manual/install.md, Local
# cluster): any Debian bookworm with `python` and `pip` of Python 3.11 first on PATH.
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*

ENV PYTHONUNBUFFERED=1 \
    PYSPARK_PYTHON=python3 \
    PYSPARK_DRIVER_PYTHON=python3

WORKDIR /opt/rmq
COPY pyproject.toml README.md ./
COPY proto proto
COPY store store
COPY broker_server broker_server
COPY connector connector
COPY cli cli
RUN pip install --no-cache-dir ".[broker,spark]"
# The examples run from /opt/rmq (`python -m examples.orders`, `spark-submit examples/streaming_etl.py`).
COPY examples examples

EXPOSE 9876 10911 7077 8080 8081
CMD ["rmq", "--help"]
