#!/usr/bin/env bash
# `make compose-test`: docker-compose.yml for real (integration_tests/test_cluster_docker.py) on
# a Debian machine, with no image registry needed. Installs only what is missing, so a second
# run goes straight to the test:
#   - Debian's docker.io and debootstrap (apt-get; needs root);
#   - Compose v2 (`docker compose`): Debian 12 ships only v1, which rejects the file's top-level
#     `name:`, so the plugin comes from the next release's docker-compose 2.x package, fetched
#     with apt from the machine's own Debian mirror and unpacked into the CLI plugins folder;
#   - a Docker engine: dockerd (overlay2) started here when none answers, and stopped on exit;
#   - the Dockerfile's base (RMQ_BASE_IMAGE): the official python:3.11-slim-bookworm where it is
#     present or can be pulled, else rmq-base:bookworm built from scripts/base.Dockerfile on a
#     `debootstrap --variant=minbase` of the machine's release.
# The images stay for the next run; the cluster's containers, network and volumes do not.
# Give RMQ_BASE_IMAGE to build on another base.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV_PYTHON=.venv/bin/python
OFFICIAL_BASE=python:3.11-slim-bookworm
LOCAL_BASE=rmq-base:bookworm
ROOTFS_IMAGE=rmq-base:bookworm-rootfs
COMPOSE_SUITE=trixie                           # the first Debian release with Compose v2
PLUGIN_DIR=/usr/local/lib/docker/cli-plugins   # searched by the docker CLI, owned by no package
RUN_DIR=${RMQ_COMPOSE_RUN_DIR:-/tmp/rmq-compose-test}
DOCKERD_PID=""
SCRATCH=$(mktemp -d)

log() { echo "compose-test: $*" >&2; }

fail() { log "$*"; exit 1; }

cleanup() {
    if [ -n "$DOCKERD_PID" ]; then
        docker compose down --volumes --remove-orphans --timeout 10 >/dev/null 2>&1 || true
        log "stopping the dockerd started here (pid $DOCKERD_PID)"
        kill -TERM "$DOCKERD_PID" 2>/dev/null || true
        wait "$DOCKERD_PID" 2>/dev/null || true
    fi
    rm -rf "$SCRATCH"
}
trap cleanup EXIT

# Runs "$@" until it succeeds, for at most $1 seconds.
wait_for() {
    local seconds=$1
    shift
    local deadline=$((SECONDS + seconds))
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 1
    done
}

require_root() {
    [ "$(id -u)" = 0 ] || fail "$1 is missing and installing it needs root (docs/manual/install.md, Local cluster)"
}

apt_install() {
    require_root "$*"
    log "apt-get install $*"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq "$@" >/dev/null || { apt-get update -qq && apt-get install -y -qq "$@" >/dev/null; }
}

install_packages() {
    local missing=()
    command -v dockerd >/dev/null || missing+=(docker.io)
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    [ ${#missing[@]} = 0 ] || apt_install "${missing[@]}"
}

# shellcheck source=/dev/null
codename() { . /etc/os-release && echo "$VERSION_CODENAME"; }

# The URI of the Debian archive the machine's apt uses for its own release.
debian_mirror() {
    # shellcheck disable=SC2016  # $(...) are apt's format fields
    apt-get indextargets --format '$(RELEASE) $(REPO_URI)' 'Identifier: Packages' \
        | awk -v release="$(codename)" '$1 == release { print $2; exit }'
}

# apt-get with a sources list of its own ($SCRATCH/apt): the machine's apt setup is untouched.
scratch_apt() {
    apt-get -q -o Dir::Etc::SourceList="$SCRATCH/apt/sources.list" -o Dir::Etc::SourceParts="$SCRATCH/apt/none" \
        -o Dir::State::Lists="$SCRATCH/apt/lists" -o Dir::Cache="$SCRATCH/apt/cache" \
        -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= -o APT::Sandbox::User=root "$@"
}

install_compose_plugin() {
    docker compose version >/dev/null 2>&1 && return
    require_root "Compose v2 (docker compose)"
    local mirror
    mirror=$(debian_mirror)
    [ -n "$mirror" ] || fail "no Debian archive for $(codename) in the machine's apt sources"
    log "Compose v2: docker-compose from $COMPOSE_SUITE"
    mkdir -p "$SCRATCH/apt/none" "$SCRATCH/apt/lists/partial" "$SCRATCH/apt/cache/archives/partial" "$SCRATCH/deb"
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $COMPOSE_SUITE main" \
        > "$SCRATCH/apt/sources.list"
    scratch_apt update >/dev/null
    (cd "$SCRATCH/deb" && scratch_apt download docker-compose >/dev/null)
    dpkg-deb -x "$SCRATCH"/deb/docker-compose_*.deb "$SCRATCH/deb/root"
    install -D -m 755 "$SCRATCH/deb/root/usr/libexec/docker/cli-plugins/docker-compose" "$PLUGIN_DIR/docker-compose"
    docker compose version >/dev/null || fail "docker compose does not run after installing $PLUGIN_DIR/docker-compose"
}

start_engine() {
    if docker info >/dev/null 2>&1; then
        log "using the Docker engine that answers"
        return
    fi
    require_root "a running Docker engine"
    mkdir -p "$RUN_DIR"
    log "starting dockerd (log: $RUN_DIR/dockerd.log)"
    # its own session: a Ctrl-C reaches this script, whose exit trap then stops it in order
    setsid dockerd --storage-driver overlay2 > "$RUN_DIR/dockerd.log" 2>&1 &
    DOCKERD_PID=$!
    wait_for 120 docker info || fail "dockerd did not answer within 120 s: $(tail -3 "$RUN_DIR/dockerd.log")"
}

have_image() { docker image inspect "$1" >/dev/null 2>&1; }

# rmq-base:bookworm: the machine's Debian release (debootstrap, once) + scripts/base.Dockerfile.
build_local_base() {
    if ! have_image "$ROOTFS_IMAGE"; then
        local mirror
        mirror=$(debian_mirror)
        [ -n "$mirror" ] || fail "no Debian archive for $(codename) in the machine's apt sources"
        log "debootstrap --variant=minbase $(codename) from $mirror"
        debootstrap --variant=minbase "$(codename)" "$SCRATCH/rootfs" "$mirror" > "$SCRATCH/debootstrap.log" \
            || fail "debootstrap failed: $(tail -3 "$SCRATCH/debootstrap.log")"
        rm -rf "$SCRATCH"/rootfs/var/cache/apt/archives/*.deb "$SCRATCH"/rootfs/var/lib/apt/lists/*
        tar -C "$SCRATCH/rootfs" -c . | docker import - "$ROOTFS_IMAGE" >/dev/null
        rm -rf "$SCRATCH/rootfs"
    fi
    mkdir -p "$SCRATCH/base/ca-certificates"
    cp /usr/local/share/ca-certificates/*.crt "$SCRATCH/base/ca-certificates/" 2>/dev/null || true
    log "building $LOCAL_BASE"
    docker build -q --build-arg ROOTFS="$ROOTFS_IMAGE" -t "$LOCAL_BASE" -f scripts/base.Dockerfile \
        "$SCRATCH/base" >/dev/null
}

choose_base_image() {
    if [ -n "${RMQ_BASE_IMAGE:-}" ]; then
        have_image "$RMQ_BASE_IMAGE" || docker pull -q "$RMQ_BASE_IMAGE" >/dev/null
    elif have_image "$OFFICIAL_BASE" || timeout 300 docker pull -q "$OFFICIAL_BASE" >/dev/null 2>&1; then
        RMQ_BASE_IMAGE=$OFFICIAL_BASE
    else
        log "no registry serves $OFFICIAL_BASE: building $LOCAL_BASE instead"
        build_local_base
        RMQ_BASE_IMAGE=$LOCAL_BASE
    fi
    export RMQ_BASE_IMAGE
    log "base image: $RMQ_BASE_IMAGE"
}

main() {
    [ -x "$VENV_PYTHON" ] || fail "$VENV_PYTHON is missing: run make venv first"
    install_packages
    install_compose_plugin
    start_engine
    choose_base_image
    log "building the rmq and etcd images (docker compose build)"
    docker compose build --quiet
    log "the compose cluster test"
    RMQ_REQUIRE_DOCKER=1 "$VENV_PYTHON" -m pytest -q -ra -m docker integration_tests/test_cluster_docker.py "$@"
}

main "$@"
