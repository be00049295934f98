# etcd for docker-compose.yml (the controllers keep their state in it: docs/controller.md, "Controller
# on etcd"): Debian's etcd-server (3.4) on the same Debian bookworm base as ./Dockerfile (BASE_IMAGE:
# the official Python image, or the one scripts/compose_test.sh builds where no image registry
# answers), so no registry needs to serve an etcd image.
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

RUN apt-get update \
    && apt-get install -y --no-install-recommends etcd-server etcd-client \
    && rm -rf /var/lib/apt/lists/*

EXPOSE 2379 2380
CMD ["etcd", "--version"]
