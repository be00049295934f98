"""`rmq namesrv` and `rmq broker`: flags in docs/manual/cli.md; a YAML or JSON `--config` file holds
the other settings (keys named as in rmq.broker_server.config), flags given on the command line
win over the file. Both take the security flags of rmq.broker_server.security.server_security (--acl,
--tls-*)."""

from __future__ import annotations

import argparse

# The servers' own modules (the store, the gRPC server) are imported by run_namesrv / run_broker, so a
# client command, whose parser holds these parsers too, does not load them.
from rmq.broker_server.security import server_security
from rmq.broker_server.security.server_security import ServerSecurity
from rmq.cli.parser import Subcommands


def add_parsers(subparsers: Subcommands) -> None:
    namesrv = subparsers.add_parser("namesrv", help="run a name server")
    namesrv.add_argument("--listen", metavar="HOST:PORT", help="address to serve on (default 127.0.0.1:9876)")
    namesrv.add_argument("--config", metavar="FILE", help="YAML or JSON file with further settings")
    namesrv.add_argument("--controller", action="store_true", default=None,
                         help="embed the controller: it assigns master and slaves to brokers started with "
                              "--controller and elects a new master when one is lost")
    namesrv.add_argument("--controller-dir", metavar="DIR",
                         help="where the controller keeps its state (default ~/.rmq/controller)")
    namesrv.add_argument("--etcd", metavar="HOST:PORT[,HOST:PORT]",
                         help="controller: keep its state and elect the leading controller in etcd (several "
                              "controllers may then run; instead of --controller-dir)")
    namesrv.add_argument("--etcd-prefix", metavar="P", help="the etcd keys of this cluster (default /rmq)")
    namesrv.add_argument("--etcd-ca", metavar="FILE", help="TLS to etcd: the CA of its certificates")
    namesrv.add_argument("--etcd-cert", metavar="FILE", help="TLS to etcd: client certificate")
    namesrv.add_argument("--etcd-key", metavar="FILE", help="TLS to etcd: client key")
    namesrv.add_argument("--etcd-user", metavar="NAME", help="etcd authentication: user")
    namesrv.add_argument("--etcd-password-file", metavar="FILE", help="etcd authentication: its password")
    namesrv.add_argument("--cluster-secret", metavar="FILE",
                         help="controller: the cluster's shared secret (chmod 600, the brokers' "
                              "--cluster-secret file); every heartbeat must be proven with it; required "
                              "with --acl")
    _add_metrics_argument(namesrv)
    namesrv.add_argument("--remoting-listen", metavar="HOST:PORT",
                         help="also serve RocketMQ 4.x clients (remoting protocol) on this address "
                              "(off by default)")
    server_security.add_arguments(namesrv)
    namesrv.set_defaults(handler=run_namesrv)

    broker = subparsers.add_parser("broker", help="run a broker")
    broker.add_argument("--listen", metavar="HOST:PORT", help="address to serve on (default 127.0.0.1:10911)")
    broker.add_argument("--store-dir", metavar="DIR", help="store directory (default ~/.rmq/store)")
    broker.add_argument("--broker-name", metavar="NAME", help="broker name (default broker-a)")
    broker.add_argument("--namesrv", metavar="ADDR", help="name server address(es) HOST:PORT[,HOST:PORT]")
    broker.add_argument("--broker-id", metavar="ID", type=int,
                        help="0 for the broker group's master (default), 1.. for a slave")
    broker.add_argument("--role", choices=("ASYNC_MASTER", "SYNC_MASTER", "SLAVE"),
                        help="ASYNC_MASTER (default) acknowledges once stored, SYNC_MASTER once a slave "
                             "holds it too, SLAVE copies --master read-only")
    broker.add_argument("--master", metavar="HOST:PORT", help="a SLAVE's master")
    broker.add_argument("--controller", metavar="HOST:PORT[,HOST:PORT]",
                        help="controller mode: the name server(s) with --controller assign this member's "
                             "role (--role then names the master's mode); of several, the leader is followed")
    broker.add_argument("--cluster-secret", metavar="FILE",
                        help="the broker group's shared secret (chmod 600, the same file on every member): "
                             "master and slaves authenticate each other; required with --acl")
    broker.add_argument("--min-in-sync-replicas", metavar="N", type=int,
                        help="SYNC_MASTER: members, master included, that hold a send before it is "
                             "acknowledged (default 2: on a slave too); 1, with --controller: the master "
                             "alone once the controller's in-sync set is the master alone")
    broker.add_argument("--ha-max-time-not-caught-up-ms", metavar="MS", type=int,
                        help="a slave behind the master this long leaves the in-sync set (default 15000)")
    broker.add_argument(
        "--flush",
        choices=("sync", "async"),
        help="flush to disk before acknowledging (sync) or in the background (async, the default)",
    )
    broker.add_argument("--config", metavar="FILE", help="YAML or JSON file with further settings")
    broker.add_argument("--flight-listen", metavar="HOST:PORT|off",
                        help="serve the Arrow Flight data plane here (default: --listen's host on an "
                             "ephemeral port, advertised in routes; off disables it)")
    _add_metrics_argument(broker)
    broker.add_argument("--remoting-listen", metavar="HOST:PORT|off",
                        help="serve the RocketMQ remoting protocol here: 4.x clients (give a fixed port) and "
                             "the SDK's send and held-pull path (default: --listen's host on an ephemeral "
                             "port, advertised in routes; off disables it)")
    server_security.add_arguments(broker)
    broker.set_defaults(handler=run_broker)


def _add_metrics_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metrics-listen", metavar="HOST:PORT",
                        help="serve Prometheus metrics on this address (off by default; loopback unless "
                             "--acl or TLS is on)")


def run_namesrv(args: argparse.Namespace) -> int:
    from rmq.broker_server.config import NameServerConfig, load_config
    from rmq.broker_server.name_server.namesrv_controller import serve_name_server
    from rmq.broker_server.rmq_v1.grpc_server import run_until_terminated

    config = load_config(NameServerConfig, args.config,
                         {"listen": args.listen, "metrics_listen": args.metrics_listen,
                          "remoting_listen": args.remoting_listen,
                          "controller": args.controller, "controller_dir": args.controller_dir,
                          "cluster_secret_file": args.cluster_secret, "etcd": args.etcd,
                          "etcd_prefix": args.etcd_prefix, "etcd_ca_file": args.etcd_ca,
                          "etcd_cert_file": args.etcd_cert, "etcd_key_file": args.etcd_key,
                          "etcd_user": args.etcd_user, "etcd_password_file": args.etcd_password_file})
    security = ServerSecurity.from_args(args)
    return run_until_terminated(lambda: serve_name_server(config, security))


def run_broker(args: argparse.Namespace) -> int:
    from rmq.broker_server.broker_controller import BrokerController
    from rmq.broker_server.config import BrokerConfig, load_config
    from rmq.broker_server.rmq_v1.grpc_server import run_until_terminated

    config = load_config(
        BrokerConfig,
        args.config,
        {
            "listen": args.listen,
            "store_dir": args.store_dir,
            "broker_name": args.broker_name,
            "broker_id": args.broker_id,
            "broker_role": args.role,
            "master": args.master,
            "controller": args.controller,
            "cluster_secret_file": args.cluster_secret,
            "min_in_sync_replicas": args.min_in_sync_replicas,
            "ha_max_time_not_caught_up_ms": args.ha_max_time_not_caught_up_ms,
            "namesrv": args.namesrv,
            "flush": args.flush,
            "metrics_listen": args.metrics_listen,
            "flight_listen": args.flight_listen,
            "remoting_listen": args.remoting_listen,
        },
    )
    security = ServerSecurity.from_args(args)
    if config.controller:
        from rmq.broker_server.replication.replicas_manager import serve_in_controller_mode

        return run_until_terminated(lambda: serve_in_controller_mode(config, security))
    return run_until_terminated(lambda: BrokerController(config, security).serve())
