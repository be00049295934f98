"""The sink's security options: parsed with the other options, never shown."""

from __future__ import annotations

import pickle

import pytest

from rmq.auth import ClientSecurity

writer = pytest.importorskip("rmq.connector.spark.writer")   # the sink imports pyspark

SECRET = "topsecret1"
ENDPOINTS = {"endpoints": "127.0.0.1:10911"}


def test_sink_options_carry_security_to_tasks() -> None:
    given = {**ENDPOINTS, "accessKey": "user01", "SECRETKEY": SECRET, "tls": "true"}
    options = writer.SinkOptions.parse(given)
    assert options.security == ClientSecurity("user01", SECRET, True, None)
    assert pickle.loads(pickle.dumps(options)).security.secret_key == SECRET
    assert SECRET not in repr(options)


def test_sink_without_security_options_is_plain() -> None:
    assert writer.SinkOptions.parse(ENDPOINTS).security == ClientSecurity()


@pytest.mark.parametrize(("options", "message"), [
    ({"secretKey": SECRET}, "secretKey is set but accessKey is not"),
    ({"accessKey": "user01", "secretKey": SECRET, "tls": "maybe"}, "option 'tls': expected true or false"),
    ({"tlsCaFile": "/nonexistent/ca.pem", "accessKey": "user01", "secretKey": SECRET}, "option 'tlsCaFile'"),
])
def test_sink_security_errors_name_the_option_not_the_secret(options: dict, message: str) -> None:
    with pytest.raises(writer.RmqSinkError, match=message) as raised:
        writer.SinkOptions.parse({**ENDPOINTS, **options})
    assert SECRET not in str(raised.value)
