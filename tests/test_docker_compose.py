"""docker-compose.yml and Dockerfile, checked without a Docker engine: the services and their
wiring, and that every `rmq` / ETL command they run is accepted by our own argument parsers."""

from __future__ import annotations

import ast
import importlib.util
import re
import shlex
import tomllib
from pathlib import Path

import pytest
import yaml

from rmq.cli.console_command import DEFAULT_LISTEN
from rmq.cli.main import build_parser

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, dict] = COMPOSE["services"]
HEALTH_CONDITIONS = {"service_healthy", "service_completed_successfully", "service_started"}
SHELL_OPERATORS = re.compile(r"\|\||&&|[|;]")


def command_of(service: str) -> list[str]:
    command = SERVICES[service]["command"]
    return command if isinstance(command, list) else shlex.split(command)


def commands_in(words: list[str]) -> list[list[str]]:
    """The simple commands a service or health check runs (`sh -c` pipelines split up)."""
    if words[:1] == ["CMD"]:
        words = words[1:]
    if words[:2] == ["sh", "-c"]:
        return [shlex.split(part) for part in SHELL_OPERATORS.split(words[2])]
    return [words]


def all_commands() -> list[tuple[str, list[str]]]:
    found = []
    for name, service in SERVICES.items():
        found += [(name, words) for words in commands_in(command_of(name))]
        if "healthcheck" in service:
            found += [(f"{name} healthcheck", words) for words in commands_in(service["healthcheck"]["test"])]
    return found


def rmq_commands() -> list[tuple[str, list[str]]]:
    return [(where, words) for where, words in all_commands() if words[0] == "rmq"]


def option(words: list[str], name: str) -> str:
    return words[words.index(name) + 1]


NAMESRVS = ("namesrv", "namesrv-2")
ETCD_MEMBERS = ("etcd-0", "etcd-1", "etcd-2")


def namesrv_endpoints() -> str:
    """Every name server's --listen, as clients and brokers are given them."""
    return ",".join(option(command_of(name), "--listen") for name in NAMESRVS)


def test_services_of_the_local_cluster():
    assert set(SERVICES) == {
        *ETCD_MEMBERS, *NAMESRVS, "broker-a", "broker-a-slave", "broker-b", "topic-init", "producer",
        "spark-master", "spark-worker", "etl-job", "cli",
    }


def test_the_name_servers_are_controllers_on_the_three_member_etcd():
    """Issue 44: two controllers keep broker-a's state in etcd (docs/controller.md); each etcd
    member names itself, keeps its data in a volume of its own and knows the other two."""
    cluster = ",".join(f"{m}=http://{m}:2380" for m in ETCD_MEMBERS)
    for member in ETCD_MEMBERS:
        service = SERVICES[member]
        etcd = shlex.split(command_of(member)[2].replace("$$(hostname)", member))
        assert service["hostname"] == member and option(etcd, "--name") == member
        assert option(etcd, "--initial-cluster") == cluster
        volume, mount = service["volumes"][0].split(":")
        assert volume in COMPOSE["volumes"] and option(etcd, "--data-dir") == mount
    endpoints = ",".join(f"{m}:2379" for m in ETCD_MEMBERS)
    prefixes = set()
    for name in NAMESRVS:
        command = command_of(name)
        assert "--controller" in command and option(command, "--etcd") == endpoints
        prefixes.add(option(command, "--etcd-prefix"))
        assert {SERVICES[name]["depends_on"][m]["condition"] for m in ETCD_MEMBERS} == {"service_healthy"}
    assert len(prefixes) == 1   # one cluster: one prefix


def test_etcd_is_debians_etcd_server_on_the_rmq_images_base():
    dockerfile = (ROOT / "etcd.Dockerfile").read_text()
    assert re.findall(r"^ARG BASE_IMAGE=(\S+)$", dockerfile, re.MULTILINE) == ["python:3.11-slim-bookworm"]
    assert re.search(r"^FROM \$\{BASE_IMAGE\}$", dockerfile, re.MULTILINE) and "etcd-server" in dockerfile


def test_the_cli_service_is_a_client_started_only_on_demand():
    """`docker compose run --rm cli rmq ...` reaches the servers by service name; `up` leaves
    it out (a profile)."""
    cli = SERVICES["cli"]
    assert cli["profiles"] and all("profiles" not in SERVICES[name] for name in set(SERVICES) - {"cli"})
    assert option(command_of("cli"), "--endpoints") == namesrv_endpoints()


def test_every_service_runs_the_image_built_from_our_dockerfile():
    for name, service in SERVICES.items():
        image, dockerfile = ("rmq-etcd:local", "etcd.Dockerfile") if name in ETCD_MEMBERS else ("rmq:local",
                                                                                               "Dockerfile")
        assert (service["image"], service["build"]["dockerfile"]) == (image, dockerfile), name
        assert (ROOT / service["build"]["context"] / service["build"]["dockerfile"]).is_file(), name


def test_dockerfile_installs_java_17_and_the_project_with_broker_and_spark():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM \$\{BASE_IMAGE\}$", dockerfile, re.MULTILINE)
    assert "openjdk-17-jre-headless" in dockerfile
    assert 'pip install --no-cache-dir ".[broker,spark]"' in dockerfile
    for path in re.findall(r"^COPY (\S+) ", dockerfile, re.MULTILINE):
        assert (ROOT / path).exists(), f"Dockerfile copies {path}, which does not exist"


def test_the_base_image_is_the_official_python_image_unless_rmq_base_image_says_otherwise():
    """A plain `docker compose up --build` builds on python:3.11-slim-bookworm; make compose-test
    sets RMQ_BASE_IMAGE where no registry serves it."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    default = re.findall(r"^ARG BASE_IMAGE=(\S+)$", dockerfile, re.MULTILINE)
    assert default == ["python:3.11-slim-bookworm"]
    for name, service in SERVICES.items():
        assert service["build"]["args"]["BASE_IMAGE"] == f"${{RMQ_BASE_IMAGE:-{default[0]}}}", name


def test_ci_runs_the_compose_cluster_test_and_make_test_leaves_it_to_that():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^compose-test: .*\n\tbash scripts/compose_test\.sh$", makefile, re.MULTILINE)
    assert '-m "not slow and not docker"' in makefile
    assert "make compose-test" in (ROOT / ".ci" / "run").read_text().splitlines()


def test_dockerignore_keeps_the_venv_and_git_out_of_the_build_context():
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv"} <= set(ignored)


@pytest.mark.parametrize(("where", "words"), rmq_commands(), ids=lambda v: v if isinstance(v, str) else "")
def test_rmq_commands_exist_in_our_cli(where, words):
    build_parser().parse_args(words[1:])


def test_the_cluster_runs_the_rmq_commands_it_needs():
    verbs = {tuple(words[1:3]) for _, words in rmq_commands()}
    needed = {("namesrv", "--listen"), ("broker", "--listen"), ("topic", "create"), ("produce", "orders")}
    assert needed <= verbs


def test_brokers_register_with_the_name_servers_and_keep_their_store_in_a_volume():
    for name in ("broker-a", "broker-b"):
        command = command_of(name)
        assert option(command, "--broker-name") == name
        assert option(command, "--listen") == f"{name}:10911"
        assert option(command, "--namesrv") == namesrv_endpoints()
        assert {SERVICES[name]["depends_on"][n]["condition"] for n in NAMESRVS} == {"service_healthy"}
        volume, mount = SERVICES[name]["volumes"][0].split(":")
        assert volume in COMPOSE["volumes"]
        assert option(command, "--store-dir").startswith(mount + "/")
    assert SERVICES["broker-a"]["volumes"] != SERVICES["broker-b"]["volumes"]


def test_broker_a_is_a_sync_master_with_a_slave_on_its_own_store():
    """docs/controller.md: one broker name, ids 0 and 1 in controller mode (--role names the
    master's mode; the controllers assign the roles), the first started (id 0) is master."""
    master, slave = command_of("broker-a"), command_of("broker-a-slave")
    assert (option(master, "--broker-id"), option(master, "--role")) == ("0", "SYNC_MASTER")
    assert (option(slave, "--broker-id"), option(slave, "--role")) == ("1", "SYNC_MASTER")
    assert option(slave, "--broker-name") == "broker-a" and "--master" not in slave
    for command in (master, slave):
        assert option(command, "--controller") == option(command, "--namesrv") == namesrv_endpoints()
    assert SERVICES["broker-a-slave"]["depends_on"]["broker-a"]["condition"] == "service_healthy"
    volume, mount = SERVICES["broker-a-slave"]["volumes"][0].split(":")
    assert volume in COMPOSE["volumes"] and volume not in SERVICES["broker-a"]["volumes"][0]
    assert option(slave, "--store-dir").startswith(mount + "/")
    check = SERVICES["broker-a-slave"]["healthcheck"]["test"]
    assert option(check, "--endpoints") == option(slave, "--listen") == "broker-a-slave:10911"
    assert "--insecure-listen" in slave


def test_servers_listening_beyond_loopback_say_so_or_take_an_acl():
    """A server without --acl refuses a non-loopback --listen unless --insecure-listen is given."""
    for name in (*NAMESRVS, "broker-a", "broker-b"):
        command = command_of(name)
        assert "--insecure-listen" in command or "--acl" in command


def test_servers_health_checks_ask_the_server_itself():
    for name in (*NAMESRVS, "broker-a", "broker-b"):
        check = SERVICES[name]["healthcheck"]["test"]
        assert check[:2] == ["CMD", "rmq"]
        assert option(check, "--endpoints") == option(command_of(name), "--listen")


PUBLISHED = re.compile(r"^\$\{RMQ_PUBLISH_ADDRESS:-127\.0\.0\.1\}:\$\{(RMQ_\w+_PORT)-(\d+)\}:(\d+)$")


def published_ports() -> list[tuple[str, str, int, int]]:
    """(service, host port variable, its default, container port) of every published port."""
    found = []
    for name, service in SERVICES.items():
        for mapping in service.get("ports", []):
            match = PUBLISHED.match(mapping)
            assert match, f"{name} publishes {mapping!r}: expected ${{RMQ_PUBLISH_ADDRESS:-127.0.0.1}}:" \
                          "${RMQ_<SERVICE>_PORT-<port>}:<port>"
            found.append((name, match[1], int(match[2]), int(match[3])))
    return found


def test_published_ports_reach_the_servers_and_do_not_clash():
    published: dict[int, str] = {}
    for name, _, host, container in published_ports():
        assert host not in published, f"host port {host} used by {published.get(host)} and {name}"
        published[host] = name
        if name in (*NAMESRVS, "broker-a", "broker-b"):
            assert option(command_of(name), "--listen").endswith(f":{container}")
    assert published[9876] == "namesrv"
    assert {published[10911], published[10912]} == {"broker-a", "broker-b"}


def test_ports_are_published_on_loopback_with_a_variable_each_and_not_on_the_consoles():
    """#46 defect 9: the unauthenticated cluster was published on 0.0.0.0 and `make compose-test`
    failed when anything on the host held 10911. Every published port binds 127.0.0.1 unless
    RMQ_PUBLISH_ADDRESS says otherwise, has its own host-port variable (the compose test sets each
    to "", any free port: test_cluster_docker.ephemeral_ports), and none is the console's default
    port (8080 was the Spark master's web UI, published here)."""
    variables = [variable for _, variable, _, _ in published_ports()]
    assert len(variables) == len(set(variables)) == sum(len(s.get("ports", [])) for s in SERVICES.values())
    console_port = int(DEFAULT_LISTEN.rpartition(":")[2])
    assert all(console_port not in (host, container) for _, _, host, container in published_ports())
    docker_test = (ROOT / "integration_tests" / "test_cluster_docker.py").read_text()
    assert re.search(r"^\s+env = os\.environ \| ephemeral_ports\(\)$", docker_test, re.MULTILINE)


def test_dependencies_exist_use_health_conditions_and_have_no_cycle():
    for name, service in SERVICES.items():
        for dependency, spec in service.get("depends_on", {}).items():
            assert dependency in SERVICES, f"{name} depends on unknown {dependency}"
            assert spec["condition"] in HEALTH_CONDITIONS
            if spec["condition"] == "service_healthy":
                assert "healthcheck" in SERVICES[dependency], f"{dependency} has no health check"

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"dependency cycle: {' -> '.join((*path, name))}"
        for dependency in SERVICES[name].get("depends_on", {}):
            visit(dependency, (*path, name))

    for name in SERVICES:
        visit(name, ())


def test_producer_and_etl_job_use_the_topic_created_by_topic_init():
    created = next(words for _, words in rmq_commands() if words[1:3] == ["topic", "create"])
    produced = next(words for where, words in rmq_commands() if where == "producer" and words[1] == "produce")
    etl = command_of("etl-job")
    assert created[3] == produced[2] == option(etl, "--topic")
    assert int(option(created, "--queues")) == 4   # on each of the two brokers
    assert SERVICES["producer"]["depends_on"]["topic-init"]["condition"] == "service_completed_successfully"


def test_producer_pipes_sample_orders_from_the_examples_module():
    pipeline = commands_in(command_of("producer"))
    assert pipeline[0][:3] == ["python", "-m", "examples.orders"]
    from examples.orders import main

    assert main(["--count", "0", "--step-ms", "100"]) == 0   # its arguments parse


def test_spark_worker_joins_the_master():
    master = command_of("spark-master")
    worker = command_of("spark-worker")
    assert master[:2] == ["spark-class", "org.apache.spark.deploy.master.Master"]
    assert worker[:2] == ["spark-class", "org.apache.spark.deploy.worker.Worker"]
    assert worker[2] == f"spark://{option(master, '--host')}:{option(master, '--port')}"


def test_etl_job_is_submitted_to_the_master_with_valid_arguments():
    pytest.importorskip("pyspark")
    from examples.streaming_etl import parse_args

    command = command_of("etl-job")
    assert command[0] == "spark-submit"
    assert option(command, "--master") == command_of("spark-worker")[2]
    script = next(word for word in command if word.endswith(".py"))
    assert (ROOT / script).is_file()
    args = parse_args(command[command.index(script) + 1:])
    assert args.endpoints == namesrv_endpoints()
    # the driver (etl-job) and the executors (spark-worker) write Parquet to one volume
    volume, mount = SERVICES["etl-job"]["volumes"][0].split(":")
    assert SERVICES["spark-worker"]["volumes"] == SERVICES["etl-job"]["volumes"]
    assert args.output.startswith(mount + "/") and args.checkpoint.startswith(mount + "/")
    assert volume in COMPOSE["volumes"]


def python_modules_run() -> list[Path]:
    """The Python files the services run (`python -m examples.x`, `spark-submit x.py`) and the
    examples modules they import."""
    files = []
    for _, words in all_commands():
        if words[:2] == ["python", "-m"]:
            files.append(ROOT / (words[2].replace(".", "/") + ".py"))
        files += [ROOT / word for word in words if word.endswith(".py")]
    pending, seen = files, set()
    while pending:
        path = pending.pop()
        if path not in seen:
            seen.add(path)
            pending += [ROOT / (name.replace(".", "/") + ".py") for name in imported_modules(path)
                        if name.startswith("examples.")]
    return sorted(seen)


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    return names | {node.module for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0}


def package_directories() -> set[str]:
    """The top directories `rmq` is built from (pyproject.toml package-dir): proto, store, ..."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {path.split("/")[0] for path in pyproject["tool"]["setuptools"]["package-dir"].values()}


def test_the_cluster_jobs_import_the_project_as_rmq_only():
    """The ETL job and the producer import our code as `rmq.*` (the one installed import name;
    the image holds no `connector`, `store`, ... package), and every such module exists."""
    modules = python_modules_run()
    assert {ROOT / "examples" / "streaming_etl.py", ROOT / "examples" / "orders.py"} <= set(modules)
    old_names = package_directories()
    for path in modules:
        for name in imported_modules(path):
            assert name.split(".")[0] not in old_names, f"{path.name} imports {name}: import it as rmq.*"
            if name.split(".")[0] == "rmq":
                assert importlib.util.find_spec(name) is not None, f"{path.name} imports {name}: missing"


def test_the_image_copies_every_directory_the_rmq_package_is_built_from():
    """pip install in the image builds `rmq` from the package-dir directories of pyproject.toml:
    each must be copied in before it."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    copied_before_install = re.findall(r"^COPY (\S+) ", dockerfile.split("pip install")[0], re.MULTILINE)
    package_dirs = package_directories()
    assert package_dirs <= set(copied_before_install), package_dirs - set(copied_before_install)
