"""ACL model: file formats, validation errors, permission checks, address patterns, reload."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import textwrap
from pathlib import Path

import pytest

from rmq.broker_server.security.acl import (
    AccessDenied,
    AclError,
    AddressPattern,
    Need,
    Perm,
    ResourceKind,
    load_acl,
    parse_perm,
)
from rmq.broker_server.security.acl_file import AclFile
from tests.acl_files import write_acl
from tests.waiting import wait_until_async

TOPIC, GROUP = ResourceKind.TOPIC, ResourceKind.GROUP

ACL_YAML = """\
globalWhiteRemoteAddresses:
  - 127.0.0.1
  - 10.1.0.0/16
  - 192.168.0.*
accounts:
  - accessKey: producer1
    secretKey: "producer-secret"
    defaultTopicPerm: DENY
    topicPerms: ["orders=PUB", "audit = PUB|SUB", "secret=DENY"]
  - accessKey: consumer1
    secretKey: "consumer-secret"
    defaultTopicPerm: SUB
    defaultGroupPerm: DENY
    topicPerms: ["secret=DENY"]
    groupPerms: ["etl=SUB", "other=PUB"]
    whiteRemoteAddress: 10.1.2.*
  - accessKey: rocketmq2
    secretKey: "admin-secret"
    admin: true
"""


def write(path: Path, text: str) -> Path:
    return write_acl(path, textwrap.dedent(text))


@pytest.fixture
def acl(tmp_path: Path):
    return load_acl(write(tmp_path / "acl.yml", ACL_YAML))


def test_topic_permissions_follow_the_account_entries(acl) -> None:
    acl.check("producer1", "orders", TOPIC, Need.PUB)
    acl.check("producer1", "audit", TOPIC, Need.SUB)
    with pytest.raises(AccessDenied, match="access key 'producer1' lacks SUB on topic 'orders'"):
        acl.check("producer1", "orders", TOPIC, Need.SUB)
    with pytest.raises(AccessDenied, match="lacks PUB on topic 'unlisted'"):
        acl.check("producer1", "unlisted", TOPIC, Need.PUB)


def test_defaults_apply_to_unlisted_resources_and_deny_overrides_them(acl) -> None:
    acl.check("consumer1", "anything", TOPIC, Need.SUB)
    with pytest.raises(AccessDenied, match="lacks PUB on topic 'anything'"):
        acl.check("consumer1", "anything", TOPIC, Need.PUB)
    with pytest.raises(AccessDenied, match="lacks SUB on topic 'secret'"):
        acl.check("consumer1", "secret", TOPIC, Need.SUB)
    with pytest.raises(AccessDenied, match="lacks SUB on group 'unlisted'"):
        acl.check("consumer1", "unlisted", GROUP, Need.SUB)


def test_group_permissions(acl) -> None:
    acl.check("consumer1", "etl", GROUP, Need.SUB)
    with pytest.raises(AccessDenied, match="lacks SUB on group 'other'"):
        acl.check("consumer1", "other", GROUP, Need.SUB)


def test_any_needs_pub_or_sub(acl) -> None:
    acl.check("producer1", "orders", TOPIC, Need.ANY)
    acl.check("consumer1", "orders", TOPIC, Need.ANY)
    with pytest.raises(AccessDenied, match="lacks PUB or SUB on topic 'secret'"):
        acl.check("producer1", "secret", TOPIC, Need.ANY)


def test_retry_topic_is_checked_as_its_group(acl) -> None:
    acl.check("consumer1", "%RETRY%etl", TOPIC, Need.SUB)
    with pytest.raises(AccessDenied, match="lacks SUB on group 'other'"):
        acl.check("consumer1", "%RETRY%other", TOPIC, Need.SUB)


def test_admin_holds_every_permission(acl) -> None:
    acl.check("rocketmq2", "secret", TOPIC, Need.PUB)
    acl.check("rocketmq2", "any-group", GROUP, Need.SUB)


def test_unknown_access_key_is_denied(acl) -> None:
    with pytest.raises(AccessDenied, match="unknown access key 'nobody'"):
        acl.check("nobody", "orders", TOPIC, Need.PUB)


def test_global_white_remote_addresses_are_an_allow_list(acl) -> None:
    assert acl.address_allowed("127.0.0.1")
    assert acl.address_allowed("10.1.200.3")
    assert acl.address_allowed("192.168.0.77")
    assert acl.address_allowed("::ffff:192.168.0.77")      # IPv4-mapped IPv6 peer
    assert not acl.address_allowed("192.168.1.77")
    assert not acl.address_allowed("10.2.0.1")
    assert not acl.address_allowed("::1")


def test_account_white_remote_address_restricts_where_it_is_used(acl) -> None:
    consumer = acl.account("consumer1")
    assert consumer.may_connect_from("10.1.2.3")
    assert not consumer.may_connect_from("10.1.3.3")
    assert acl.account("producer1").may_connect_from("203.0.113.9")


@pytest.mark.parametrize(("pattern", "address", "expected"), [
    ("*", "203.0.113.9", True),
    ("*", "::1", True),
    ("192.168.*.1", "192.168.44.1", True),
    ("192.168.*.1", "192.168.44.2", False),
    ("10.0.0.0/8", "10.255.0.1", True),
    ("10.0.0.0/8", "11.0.0.1", False),
    ("2001:db8::/32", "2001:db8::5", True),
    ("2001:db8::/32", "10.0.0.1", False),
    ("127.0.0.1", "127.0.0.1", True),
    ("127.0.0.1", "127.0.0.2", False),
    ("192.168.0.*", "not-an-ip", False),
])
def test_address_patterns(pattern: str, address: str, expected: bool) -> None:
    assert AddressPattern.parse(pattern).matches(address) is expected


@pytest.mark.parametrize("pattern", ["192.168.*", "300.1.1.*", "host.example", "10.0.0.0/40"])
def test_bad_address_patterns_are_refused(pattern: str) -> None:
    with pytest.raises(ValueError, match="bad address pattern"):
        AddressPattern.parse(pattern)


@pytest.mark.parametrize(("text", "perm"), [
    ("PUB", Perm.PUB), ("SUB", Perm.SUB), ("PUB|SUB", Perm.PUB | Perm.SUB), ("sub|pub", Perm.PUB | Perm.SUB),
    ("DENY", Perm.DENY),
])
def test_parse_perm(text: str, perm: Perm) -> None:
    assert parse_perm(text) == perm


@pytest.mark.parametrize("text", ["PUSH", "PUB|DENY", "PUB|PUB", "", "PUB|"])
def test_parse_perm_refuses_unknown_words(text: str) -> None:
    with pytest.raises(ValueError, match="use PUB, SUB, PUB\\|SUB or DENY"):
        parse_perm(text)


def test_json_file_loads_the_same_model(tmp_path: Path) -> None:
    path = write(tmp_path / "acl.json", json.dumps({"accounts": [
        {"accessKey": "jsonuser", "secretKey": "json-secret", "topicPerms": ["t1=PUB|SUB"]},
    ]}))
    acl = load_acl(path)
    acl.check("jsonuser", "t1", TOPIC, Need.PUB)
    assert acl.global_white_remote_addresses == ()
    assert acl.address_allowed("198.51.100.1")


@pytest.mark.parametrize(("body", "message"), [
    ("accounts: {}", r"acl.yml: 'accounts' must be a list"),
    ("- just a list", r"acl.yml: the top level must be a mapping"),
    ("acounts: []", r"acl.yml: unknown key\(s\) acounts"),
    ("accounts:\n  - secretKey: 'topsecret1'", r"accounts\[0\]: accessKey must be a string of at least 6"),
    ("accounts:\n  - {accessKey: user01, secretKey: 'topsecret1', topicPerms: ['orders=PUSH']}",
     r"accounts\[0\] \(accessKey 'user01'\): topicPerms: entry 'orders=PUSH': unknown permission 'PUSH'"),
    ("accounts:\n  - {accessKey: user01, secretKey: 'topsecret1', groupPerms: ['g1']}",
     r"groupPerms: entry 'g1' must look like 'name=PUB\|SUB'"),
    ("accounts:\n  - {accessKey: user01, secretKey: 'topsecret1', topicPerms: ['a=PUB', 'a=SUB']}",
     r"topicPerms: 'a' is listed twice"),
    ("accounts:\n  - {accessKey: user01, secretKey: 'topsecret1'}\n"
     "  - {accessKey: user01, secretKey: 'xyzxyz'}",
     r"accounts\[1\]: duplicate accessKey 'user01'"),
    ("accounts:\n  - {accessKey: user01, secretKey: 12345678}",
     r"\(accessKey 'user01'\): secretKey must be a string .*quote it in YAML"),
    ("accounts:\n  - {accessKey: user01, secretKey: 'topsecret1', admin: 'yes'}",
     r"admin must be true or false"),
    ("accounts:\n  - {accessKey: user01, secretKey: 'topsecret1', secretkey: 'typo'}",
     r"\(accessKey 'user01'\): unknown key\(s\) secretkey"),
    ("globalWhiteRemoteAddresses: ['192.168.*']\naccounts: []",
     r"globalWhiteRemoteAddresses: bad address pattern '192.168.\*'"),
    ("accounts:\n  - {accessKey: user01, secretKey: 'topsecret1', whiteRemoteAddress: 'nope'}",
     r"whiteRemoteAddress: bad address pattern 'nope'"),
    ("accounts:\n  - {accessKey: user01, secretKey: 'topsecret1', whiteRemoteAddress: ''}",
     r"whiteRemoteAddress must be one address pattern \(\"\*\" for any address\); leave the key out"),
    ("accounts:\n  - {accessKey: user01, secretKey: 'topsecret1', whiteRemoteAddress: '  '}",
     r"whiteRemoteAddress must be one address pattern"),
    ("accounts:\n  - {accessKey: user01, secretKey: 'topsecret1', brokerName: ''}",
     r"brokerName must be a broker name"),
])
def test_validation_errors_name_the_file_and_entry(tmp_path: Path, body: str, message: str) -> None:
    path = write(tmp_path / "acl.yml", body)
    with pytest.raises(AclError, match=message) as raised:
        load_acl(path)
    assert str(path) in str(raised.value)
    assert "topsecret1" not in str(raised.value)


def test_syntax_errors_give_the_position_without_quoting_the_line(tmp_path: Path) -> None:
    path = write(tmp_path / "acl.yml", "accounts:\n  - accessKey: user01\n    secretKey: 'hunter22: [\n")
    with pytest.raises(AclError, match=r"acl.yml: not valid YAML: .* at line \d+ column \d+") as raised:
        load_acl(path)
    assert "hunter22" not in str(raised.value)
    json_path = write(tmp_path / "acl.json", '{"accounts": [{"accessKey": "user01", "secretKey": "hunter22"')
    with pytest.raises(AclError, match=r"acl.json: not valid JSON: .* at line 1 column \d+") as raised:
        load_acl(json_path)
    assert "hunter22" not in str(raised.value)


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(AclError, match=r"missing.yml: cannot read ACL file: No such file"):
        load_acl(tmp_path / "missing.yml")


@pytest.mark.parametrize(("mode", "problem"), [
    (0o644, r"readable by others \(mode 0644\)"),
    (0o620, r"group-writable \(mode 0620\)"),
    (0o666, r"group-writable and writable by others and readable by others \(mode 0666\)"),
    (0o602, r"writable by others \(mode 0602\)"),
])
def test_an_acl_file_other_users_may_read_or_write_is_refused(tmp_path: Path, mode: int,
                                                               problem: str) -> None:
    path = write(tmp_path / "acl.yml", ACL_YAML)
    os.chmod(path, mode)
    with pytest.raises(AclError, match=problem + r"; it holds every secret key: run chmod 600 .*acl.yml"):
        load_acl(path)
    os.chmod(path, 0o640)     # group-readable is the owner's choice
    assert load_acl(path).account("producer1") is not None


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_an_acl_file_of_another_user_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "acl.yml", ACL_YAML)
    os.chown(path, 65534, -1)    # nobody
    with pytest.raises(AclError, match=r"acl.yml: ACL file is owned by uid 65534, not by this server's user"):
        load_acl(path)


def test_an_unsafe_edit_is_not_reloaded(tmp_path: Path, caplog) -> None:
    path = write(tmp_path / "acl.yml", ONE_ACCOUNT.format(perms="orders=SUB"))
    acl_file = AclFile(path)
    os.chmod(path, 0o666)    # anyone may now add an admin account
    path.write_text(ONE_ACCOUNT.format(perms="orders=PUB"))
    assert not acl_file.reload_if_changed()
    assert acl_file.acl.account("user01").topic_perms["orders"] == Perm.SUB
    assert "ACL not reloaded, keeping the previous one" in caplog.text and "chmod 600" in caplog.text


def test_broker_accounts_register_their_own_broker_only(tmp_path: Path) -> None:
    acl = load_acl(write(tmp_path / "acl.yml", """\
        accounts:
          - {accessKey: broker-a-reg, secretKey: 'secret-a', brokerName: broker-a}
          - {accessKey: admin01, secretKey: 'secret-b', admin: true}
        """))
    acl.check("broker-a-reg", "broker-a", ResourceKind.BROKER, Need.ANY)
    acl.check("admin01", "broker-b", ResourceKind.BROKER, Need.ANY)
    with pytest.raises(AccessDenied, match="access key 'broker-a-reg' may not register broker 'broker-b'"):
        acl.check("broker-a-reg", "broker-b", ResourceKind.BROKER, Need.ANY)
    with pytest.raises(AccessDenied, match="lacks PUB on topic 'orders'"):
        acl.check("broker-a-reg", "orders", TOPIC, Need.PUB)


def test_account_repr_hides_the_secret(acl) -> None:
    assert "producer-secret" not in repr(acl.account("producer1"))
    assert "producer-secret" not in repr(acl)


ONE_ACCOUNT = "accounts:\n  - {{accessKey: user01, secretKey: 'topsecret1', topicPerms: ['{perms}']}}\n"


def test_acl_file_reloads_when_the_file_changes(tmp_path: Path) -> None:
    path = write(tmp_path / "acl.yml", ONE_ACCOUNT.format(perms="orders=SUB"))
    acl_file = AclFile(path)
    assert not acl_file.reload_if_changed()
    write(path, ONE_ACCOUNT.format(perms="orders=PUB"))
    assert acl_file.reload_if_changed()
    acl_file.acl.check("user01", "orders", TOPIC, Need.PUB)


def test_a_broken_edit_keeps_the_acl_in_force(tmp_path: Path, caplog) -> None:
    path = write(tmp_path / "acl.yml", ONE_ACCOUNT.format(perms="orders=PUB"))
    acl_file = AclFile(path)
    write(path, ONE_ACCOUNT.format(perms="orders=PUSH"))
    assert not acl_file.reload_if_changed()
    acl_file.acl.check("user01", "orders", TOPIC, Need.PUB)
    assert "ACL not reloaded, keeping the previous one" in caplog.text
    assert "unknown permission 'PUSH'" in caplog.text
    assert not acl_file.reload_if_changed()      # the broken version is not retried until it changes


def test_acl_file_refuses_a_bad_file_at_start(tmp_path: Path) -> None:
    with pytest.raises(AclError, match="unknown permission"):
        AclFile(write(tmp_path / "acl.yml", ONE_ACCOUNT.format(perms="orders=PUSH")))


def test_watch_and_sighup_reload(tmp_path: Path) -> None:
    path = write(tmp_path / "acl.yml", ONE_ACCOUNT.format(perms="orders=SUB"))
    acl_file = AclFile(path)

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        acl_file.reload_on_sighup(loop)
        try:
            # SIGHUP reloads even when the stamp is unchanged (e.g. a same-size edit within one tick)
            stamp = os.stat(path)
            write(path, ONE_ACCOUNT.format(perms="orders=PUB"))
            os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
            os.kill(os.getpid(), signal.SIGHUP)
            await wait_until_async(lambda: acl_file.acl.account("user01").topic_perms["orders"] == Perm.PUB,
                                   "the ACL reloaded on SIGHUP: orders=PUB")
            watcher = asyncio.create_task(acl_file.watch(interval_s=0.01))
            write(path, ONE_ACCOUNT.format(perms="orders=PUB|SUB"))
            await wait_until_async(
                lambda: acl_file.acl.account("user01").topic_perms["orders"] == Perm.PUB | Perm.SUB,
                "the watcher reloaded the changed file: orders=PUB|SUB")
            watcher.cancel()
        finally:
            loop.remove_signal_handler(signal.SIGHUP)

    asyncio.run(scenario())
