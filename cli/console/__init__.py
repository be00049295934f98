"""`rmq console`: a web console a person runs the cluster from (RocketMQ Dashboard's jobs) and the
same data as JSON under /api/; server-rendered (Starlette, Jinja2), no build step, no CDN."""

from rmq.cli.console.app import ConsoleSettings, create_app
from rmq.cli.console.history import History, Sample

__all__ = ["ConsoleSettings", "History", "Sample", "create_app"]
