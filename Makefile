# rmq: `make test` and `make demo` work on a fresh machine (they create .venv first).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv check test test-unit test-integration test-slow compose-test reliability chaos power-loss demo console-screenshots bench proto lint clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	@# the power-loss test's FUSE filesystem needs fusermount3 + libfuse3 (Debian fuse3); without them it skips
	@command -v fusermount3 >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  { apt-get install -y -qq fuse3 || { apt-get update -qq && apt-get install -y -qq fuse3; }; } >/dev/null 2>&1; } || \
	  echo "fuse3 not installed (needs root + apt-get): the power-loss test will skip"
	@# the console's browser test drives Debian's chromium through Playwright (no browser download)
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  { apt-get install -y -qq chromium || { apt-get update -qq && apt-get install -y -qq chromium; }; } >/dev/null 2>&1; } || \
	  echo "chromium not installed (needs root + apt-get): the console's browser test will skip"
	@# the controller on etcd (docs/controller.md) is tested against Debian's etcd-server (etcd 3.4)
	@command -v etcd >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  { apt-get install -y -qq etcd-server || { apt-get update -qq && apt-get install -y -qq etcd-server; }; } >/dev/null 2>&1; } || \
	  echo "etcd-server not installed (needs root + apt-get): the controller-on-etcd tests will skip"
	@# chaos runs (integration_tests/chaos/) need iproute2's ip netns and tc; without them (or root) they skip
	@command -v ip >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  { apt-get install -y -qq iproute2 || { apt-get update -qq && apt-get install -y -qq iproute2; }; } >/dev/null 2>&1; } || \
	  echo "iproute2 not installed (needs root + apt-get): the chaos runs will skip"
	touch $(STAMP)

venv: $(STAMP)

## the fast tier, run on every change: unit tests and in-process-broker tests (tests/), no Spark
## cluster, no broker processes killed; under 8 minutes on 2 cores
check: $(STAMP)
	$(PY) -m pytest tests -m "not slow" -q --durations=15

## all tests: unit, then integration (real processes, one Spark session per worker); the long versions
## of a few scenarios (marked slow) run in `make test-slow`, the docker-compose cluster (marked
## docker) in `make compose-test`. Two pytest-xdist workers, each test file whole in one of them
## (the tests mostly wait; each worker picks ports from its own range: testing/processes.py)
test: $(STAMP)
	$(PY) -m pytest tests integration_tests -m "not slow and not docker" -n 2 --dist loadfile --durations=40

test-slow: $(STAMP)
	$(PY) -m pytest tests integration_tests -m slow

test-unit: $(STAMP)
	$(PY) -m pytest tests

test-integration: $(STAMP)
	$(PY) -m pytest integration_tests

## docker-compose.yml for real (integration_tests/test_cluster_docker.py); installs what is missing
## (Docker engine, Compose v2, a base image without a registry) and stops the dockerd it started
compose-test: $(STAMP)
	bash scripts/compose_test.sh

## reliability scenarios (also part of `make test`), writing the whole of RELIABILITY.md; the soak runs
## RMQ_SOAK_SECONDS (600 here, 60 in `make test`)
reliability: $(STAMP)
	RMQ_RELIABILITY_REPORT=1 RMQ_SOAK_SECONDS=$${RMQ_SOAK_SECONDS:-600} $(PY) -m pytest integration_tests/reliability

## chaos runs (integration_tests/chaos/; root + ip netns, else they skip): every fault (RMQ_CHAOS_FAULTS) on an
## interval for RMQ_CHAOS_SECONDS (600 here; a short schedule runs in `make test`) on two broker groups
## (RMQ_CHAOS_GROUPS=1: group A alone), then the weakened-group check;
## writes build/chaos/result.json and RELIABILITY.md's chaos section (the rest of that file is `make reliability`'s)
chaos: $(STAMP)
	RMQ_CHAOS_REPORT=1 RMQ_CHAOS_FAULTS=$${RMQ_CHAOS_FAULTS:-all} RMQ_CHAOS_SECONDS=$${RMQ_CHAOS_SECONDS:-600} \
	  RMQ_CHAOS_INTERVAL=$${RMQ_CHAOS_INTERVAL:-10} $(PY) -m pytest -ra -s -o timeout=7200 integration_tests/chaos

## the LazyFS tests alone (power cut, slow disk); they skip with the reason where FUSE cannot mount
power-loss: $(STAMP)
	$(PY) -m pytest -ra integration_tests/reliability/test_power_loss.py integration_tests/reliability/test_slow_disk.py

demo: $(STAMP)
	$(PY) -m examples.demo

## docs/console/*.png, the screenshots docs/console.md shows, taken by the console's browser test
console-screenshots: $(STAMP)
	RMQ_CONSOLE_SCREENSHOTS=docs/console $(PY) -m pytest -q integration_tests/test_console_browser.py

bench: $(STAMP)
	$(PY) -m bench

## regenerate the gRPC/protobuf stubs from proto/rmq/v1/rmq.proto, proto/rmq/rocketmq_v2/*.proto and the part of
## etcd's v3 API the controller uses (proto/rmq/etcd/rpc.proto, client stubs only): messages and
## their .pyi (protoc), rmq.v1's services and their typed .pyi (mypy-protobuf, servicers concrete as at run time);
## the RocketMQ 5 service has no generated servicer (broker_server/rocketmq_v2 builds its handlers)
proto: $(STAMP)
	$(PY) -m grpc_tools.protoc -Iproto --python_out=proto --pyi_out=proto --grpc_python_out=proto \
	  --plugin=protoc-gen-mypy_grpc=$(VENV)/bin/protoc-gen-mypy_grpc --mypy_grpc_out=generate_concrete_servicer_stubs:proto \
	  proto/rmq/v1/rmq.proto
	$(PY) -m grpc_tools.protoc -Iproto --python_out=proto --pyi_out=proto proto/rmq/rocketmq_v2/definition.proto proto/rmq/rocketmq_v2/service.proto
	$(PY) -m grpc_tools.protoc -Iproto --python_out=proto --pyi_out=proto --grpc_python_out=proto \
	  --plugin=protoc-gen-mypy_grpc=$(VENV)/bin/protoc-gen-mypy_grpc --mypy_grpc_out=proto proto/rmq/etcd/rpc.proto

TYPECHECK := build/typecheck

## ruff, then mypy on the product packages as installed (rmq, rmq.store, rmq.broker_server, rmq.connector, rmq.cli)
lint: $(STAMP)
	$(PY) -m ruff check .
	mkdir -p $(TYPECHECK)/rmq && rm -f $(TYPECHECK)/rmq/*   # links only; the mypy cache stays
	ln -s $(CURDIR)/proto/rmq/* $(TYPECHECK)/rmq/
	for package in store broker_server connector cli; do ln -s $(CURDIR)/$$package $(TYPECHECK)/rmq/$$package; done
	cd $(TYPECHECK) && $(CURDIR)/$(PY) -m mypy --config-file $(CURDIR)/pyproject.toml -p rmq

clean:
	rm -rf $(VENV) build *.egg-info
