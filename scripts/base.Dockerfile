# The base of ./Dockerfile where no image registry serves python:3.11-slim-bookworm
# (scripts/compose_test.sh builds it): the machine's Debian release made with debootstrap and
# `docker import` (ROOTFS), plus Python 3 in a venv that comes first on PATH, so `python`,
# `pip` and what pip installs work as in the official image, and the machine's own CA
# certificates (the build context's ca-certificates/), so pip and apt reach the package
# registries through the machine's TLS setup.
ARG ROOTFS
FROM ${ROOTFS}

COPY ca-certificates/ /usr/local/share/ca-certificates/
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/python

ENV PATH=/opt/python/bin:$PATH \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt
