"""Access control lists in RocketMQ's plain ACL model (plain_acl.yml), loaded from YAML or JSON.

    globalWhiteRemoteAddresses: ["127.0.0.1", "10.1.0.0/16", "192.168.0.*"]
    accounts:
      - accessKey: producer1
        secretKey: "a-long-secret"
        admin: false
        defaultTopicPerm: DENY
        defaultGroupPerm: DENY
        topicPerms: ["orders=PUB", "audit=PUB|SUB", "secret=DENY"]
        groupPerms: ["etl=SUB"]
        whiteRemoteAddress: "10.1.2.*"
      - accessKey: broker-a-registration
        secretKey: "another-long-secret"
        brokerName: broker-a        # may register broker-a with name servers, nothing more

Differences from RocketMQ, chosen to fail closed: `globalWhiteRemoteAddresses` is an
allow-list of the addresses that may call at all (RocketMQ lets listed addresses skip the
check), and `whiteRemoteAddress` restricts where an account may be used from. Both absent
means any address; an empty `whiteRemoteAddress` is refused rather than read as "any".
Missing default permissions are DENY. Admin accounts hold every permission (RocketMQ
PlainPermissionManager skips the check for admins). `brokerName` (not in RocketMQ) makes an
account the registration identity of that one broker.

The file holds every secret, so it must belong to the server's user (or root), not be
readable by other users nor writable by anyone but its owner (`chmod 600`); load_acl refuses
it otherwise.
"""

from __future__ import annotations

import enum
import ipaddress
import json
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rmq.broker_server.errors import BrokerError, UserError
from rmq.retry import RETRY_GROUP_TOPIC_PREFIX
from rmq.v1 import rmq_pb2

MIN_KEY_LENGTH = 6                     # RocketMQ refuses shorter access and secret keys

_TOP_LEVEL_KEYS = {"globalWhiteRemoteAddresses", "accounts", "dataVersion"}
_ACCOUNT_KEYS = {"accessKey", "secretKey", "admin", "defaultTopicPerm", "defaultGroupPerm", "topicPerms",
                 "groupPerms", "whiteRemoteAddress", "brokerName"}
UNSAFE_MODE_BITS = stat.S_IWGRP | stat.S_IWOTH | stat.S_IROTH


class AclError(BrokerError, UserError, ValueError):
    """An ACL file that cannot be used; the message names the file and the entry."""

    def __init__(self, message: str) -> None:
        super().__init__(rmq_pb2.ILLEGAL_ARGUMENT, message)


class AccessDenied(BrokerError):
    """An account lacks the permission a call needs; the message names it (never a secret)."""

    def __init__(self, message: str) -> None:
        super().__init__(rmq_pb2.NO_PERMISSION, message)


class Perm(enum.Flag):
    """Permissions an account holds on a topic or group (RocketMQ Permission)."""

    DENY = 0
    PUB = 1
    SUB = 2

    @property
    def text(self) -> str:
        return "|".join(str(p.name) for p in (Perm.PUB, Perm.SUB) if p in self) or "DENY"


class Need(enum.Enum):
    """What one call needs on one resource; ANY is RocketMQ's Permission.ANY (PUB or SUB)."""

    PUB = "PUB"
    SUB = "SUB"
    ANY = "PUB or SUB"

    def satisfied_by(self, owned: Perm) -> bool:
        if self is Need.ANY:
            return owned != Perm.DENY
        return Perm[self.name] in owned


class ResourceKind(enum.Enum):
    TOPIC = "topic"
    GROUP = "group"
    BROKER = "broker"     # registration with a name server: the account's brokerName (or admin)
    CLUSTER = "cluster"   # the whole server (topic administration, every topic at once): admin only


@dataclass(frozen=True)
class Requirement:
    """A permission a call needs: `need` on the resource `name` of `kind` (the rule tables of
    rpc_permissions for rmq.v1, security/rocketmq_v2_auth.py for RocketMQ 5)."""

    kind: ResourceKind
    name: str
    need: Need


@dataclass(frozen=True)
class AddressPattern:
    """One remote-address entry: `*`, an address, a CIDR block, or IPv4 octets with `*`."""

    text: str
    network: ipaddress.IPv4Network | ipaddress.IPv6Network | None = None
    octets: tuple[int | None, ...] | None = None   # wildcard form, None = any octet

    @classmethod
    def parse(cls, text: str) -> AddressPattern:
        text = text.strip()
        if text == "*":
            return cls(text)
        if "*" in text:
            parts = text.split(".")
            if len(parts) != 4 or not all(p == "*" or (p.isdigit() and int(p) <= 255) for p in parts):
                raise ValueError(f"bad address pattern {text!r}: wildcards take the form 192.168.0.*")
            return cls(text, octets=tuple(None if p == "*" else int(p) for p in parts))
        try:
            return cls(text, network=ipaddress.ip_network(text, strict=False))
        except ValueError:
            raise ValueError(
                f"bad address pattern {text!r}: use *, an IP address, a CIDR block or 192.168.0.*"
            ) from None

    def matches(self, address: str) -> bool:
        ip = _client_ip(address)
        if ip is None:
            return False
        if self.network is not None:
            return ip.version == self.network.version and ip in self.network
        if self.octets is None:
            return True
        return ip.version == 4 and all(
            want is None or want == got for want, got in zip(self.octets, ip.packed, strict=True)
        )


def _client_ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address as an IP; an IPv4-mapped IPv6 address counts as its IPv4 address."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


@dataclass(frozen=True)
class Account:
    access_key: str
    secret_key: str = field(repr=False)
    admin: bool = False
    default_topic_perm: Perm = Perm.DENY
    default_group_perm: Perm = Perm.DENY
    topic_perms: Mapping[str, Perm] = field(default_factory=dict)
    group_perms: Mapping[str, Perm] = field(default_factory=dict)
    white_remote_address: AddressPattern | None = None
    broker_name: str | None = None

    def perm(self, kind: ResourceKind, name: str) -> Perm:
        if kind is ResourceKind.TOPIC:
            return self.topic_perms.get(name, self.default_topic_perm)
        return self.group_perms.get(name, self.default_group_perm)

    def may_connect_from(self, address: str) -> bool:
        return self.white_remote_address is None or self.white_remote_address.matches(address)


@dataclass(frozen=True)
class Acl:
    accounts: Mapping[str, Account]
    global_white_remote_addresses: tuple[AddressPattern, ...] = ()

    def address_allowed(self, address: str) -> bool:
        """globalWhiteRemoteAddresses as an allow-list; an empty list allows every address."""
        patterns = self.global_white_remote_addresses
        return not patterns or any(p.matches(address) for p in patterns)

    def account(self, access_key: str) -> Account | None:
        return self.accounts.get(access_key)

    def check_all(self, access_key: str, requirements: Iterable[Requirement]) -> None:
        """Raise AccessDenied naming the first requirement the account does not meet."""
        for requirement in requirements:
            self.check(access_key, requirement.name, requirement.kind, requirement.need)

    def check(self, access_key: str, resource: str, kind: ResourceKind, need: Need) -> None:
        """Raise AccessDenied unless the account holds `need` on the resource.

        A retry topic `%RETRY%<group>` is checked as the group (RocketMQ checks retry
        topics against group permissions)."""
        account = self.accounts.get(access_key)
        if account is None:
            raise AccessDenied(f"unknown access key {access_key!r}")
        if account.admin:
            return
        if kind is ResourceKind.CLUSTER:
            raise AccessDenied(f"access key {access_key!r} is not an admin account, which {resource} needs")
        if kind is ResourceKind.BROKER:
            if account.broker_name is None or account.broker_name != resource:
                raise AccessDenied(f"access key {access_key!r} may not register broker {resource!r} "
                                   f"(it needs brokerName: {resource} or admin)")
            return
        target_kind, target = kind, resource
        if kind is ResourceKind.TOPIC and resource.startswith(RETRY_GROUP_TOPIC_PREFIX):
            target_kind, target = ResourceKind.GROUP, resource[len(RETRY_GROUP_TOPIC_PREFIX):]
        if not need.satisfied_by(account.perm(target_kind, target)):
            raise AccessDenied(
                f"access key {access_key!r} lacks {need.value} on {target_kind.value} {target!r}"
            )


def load_acl(path: Path) -> Acl:
    """Read an ACL file: JSON when it ends in .json, YAML otherwise. A file other users may
    read, or anyone but its owner may write, is refused before it is read."""
    source = str(path)
    try:
        with open(path, encoding="utf-8") as file:
            check_file_safety(os.fstat(file.fileno()), source)
            text = file.read()
    except OSError as error:
        raise AclError(f"{source}: cannot read ACL file: {error.strerror or error}") from None
    try:
        data = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as error:
        where = f"line {error.lineno} column {error.colno}"
        raise AclError(f"{source}: not valid JSON: {error.msg} at {where}") from None
    except yaml.YAMLError as error:
        raise AclError(f"{source}: not valid YAML: {_yaml_problem(error)}") from None
    return parse_acl(data, source)


def check_file_safety(status: os.stat_result, source: str) -> None:
    """AclError unless the file belongs to this process's user (or root), only its owner may
    write it and other users may not read it."""
    if status.st_uid not in (os.geteuid(), 0):
        raise AclError(f"{source}: ACL file is owned by uid {status.st_uid}, not by this server's user "
                       f"(uid {os.geteuid()}) or root: another user could rewrite it")
    mode = status.st_mode
    unsafe = mode & UNSAFE_MODE_BITS
    if unsafe:
        who = [text for bit, text in ((stat.S_IWGRP, "group-writable"), (stat.S_IWOTH, "writable by others"),
                                      (stat.S_IROTH, "readable by others")) if unsafe & bit]
        raise AclError(f"{source}: ACL file is {' and '.join(who)} (mode {stat.S_IMODE(mode):04o}); it holds "
                       f"every secret key: run chmod 600 {source}")


def parse_acl(data: Any, source: str) -> Acl:
    """Validate the parsed document; every error names `source` and the offending entry."""
    if not isinstance(data, dict):
        raise AclError(f"{source}: the top level must be a mapping with an 'accounts' list")
    _reject_unknown_keys(data, _TOP_LEVEL_KEYS, source)
    addresses = _address_list(data.get("globalWhiteRemoteAddresses"), f"{source}: globalWhiteRemoteAddresses")
    raw_accounts = data.get("accounts")
    if not isinstance(raw_accounts, list):
        raise AclError(f"{source}: 'accounts' must be a list of accounts")
    accounts: dict[str, Account] = {}
    for index, raw in enumerate(raw_accounts):
        account = _parse_account(raw, f"{source}: accounts[{index}]")
        if account.access_key in accounts:
            raise AclError(f"{source}: accounts[{index}]: duplicate accessKey {account.access_key!r}")
        accounts[account.access_key] = account
    return Acl(accounts, addresses)


def _parse_account(raw: Any, where: str) -> Account:
    if not isinstance(raw, dict):
        raise AclError(f"{where}: an account must be a mapping with accessKey and secretKey")
    access_key = raw.get("accessKey")
    if not isinstance(access_key, str) or len(access_key) < MIN_KEY_LENGTH:
        raise AclError(f"{where}: accessKey must be a string of at least {MIN_KEY_LENGTH} characters")
    where = f"{where} (accessKey {access_key!r})"
    _reject_unknown_keys(raw, _ACCOUNT_KEYS, where)
    secret_key = raw.get("secretKey")
    if not isinstance(secret_key, str) or len(secret_key) < MIN_KEY_LENGTH:
        raise AclError(f"{where}: secretKey must be a string of at least {MIN_KEY_LENGTH} characters "
                       f"(quote it in YAML)")
    admin = raw.get("admin", False)
    if not isinstance(admin, bool):
        raise AclError(f"{where}: admin must be true or false")
    white = raw.get("whiteRemoteAddress")
    if white is not None and (not isinstance(white, str) or not white.strip()):
        raise AclError(f"{where}: whiteRemoteAddress must be one address pattern (\"*\" for any address); "
                       f"leave the key out rather than empty")
    broker_name = raw.get("brokerName")
    if broker_name is not None and (not isinstance(broker_name, str) or not broker_name.strip()):
        raise AclError(f"{where}: brokerName must be a broker name")
    return Account(
        access_key=access_key,
        secret_key=secret_key,
        admin=admin,
        default_topic_perm=_perm(raw.get("defaultTopicPerm", "DENY"), f"{where}: defaultTopicPerm"),
        default_group_perm=_perm(raw.get("defaultGroupPerm", "DENY"), f"{where}: defaultGroupPerm"),
        topic_perms=_resource_perms(raw.get("topicPerms"), f"{where}: topicPerms"),
        group_perms=_resource_perms(raw.get("groupPerms"), f"{where}: groupPerms"),
        white_remote_address=_address(white, f"{where}: whiteRemoteAddress") if white is not None else None,
        broker_name=broker_name,
    )


def parse_perm(text: str) -> Perm:
    """`PUB`, `SUB`, `PUB|SUB` (either order) or `DENY`, case-insensitive."""
    words = [w.strip().upper() for w in text.split("|")]
    if words == ["DENY"]:
        return Perm.DENY
    if not words or any(w not in ("PUB", "SUB") for w in words) or len(set(words)) != len(words):
        raise ValueError(f"unknown permission {text!r} (use PUB, SUB, PUB|SUB or DENY)")
    perm = Perm.DENY
    for word in words:
        perm |= Perm[word]
    return perm


def _perm(value: Any, where: str) -> Perm:
    if not isinstance(value, str):
        raise AclError(f"{where}: must be one of PUB, SUB, PUB|SUB, DENY")
    try:
        return parse_perm(value)
    except ValueError as error:
        raise AclError(f"{where}: {error}") from None


def _resource_perms(value: Any, where: str) -> dict[str, Perm]:
    """`["TopicA=PUB", "TopicB=PUB|SUB"]` into {name: Perm}; names must be unique."""
    if value is None:
        return {}
    if not isinstance(value, list):
        raise AclError(f"{where}: must be a list of 'name=PERM' entries")
    perms: dict[str, Perm] = {}
    for entry in value:
        if not isinstance(entry, str) or entry.count("=") != 1:
            raise AclError(f"{where}: entry {entry!r} must look like 'name=PUB|SUB'")
        name, perm_text = (part.strip() for part in entry.split("="))
        if not name:
            raise AclError(f"{where}: entry {entry!r} has an empty name")
        if name in perms:
            raise AclError(f"{where}: {name!r} is listed twice")
        perms[name] = _perm(perm_text, f"{where}: entry {entry!r}")
    return perms


def _address_list(value: Any, where: str) -> tuple[AddressPattern, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise AclError(f"{where}: must be a list of address patterns")
    return tuple(_address(item, where) for item in value)


def _address(value: Any, where: str) -> AddressPattern:
    if not isinstance(value, str):
        raise AclError(f"{where}: address pattern {value!r} must be a string")
    try:
        return AddressPattern.parse(value)
    except ValueError as error:
        raise AclError(f"{where}: {error}") from None


def _reject_unknown_keys(raw: dict[str, Any], known: set[str], where: str) -> None:
    unknown = sorted(str(k) for k in raw if k not in known)
    if unknown:
        raise AclError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")


def _yaml_problem(error: yaml.YAMLError) -> str:
    """The problem and its position, never the quoted source line (it may hold a secret)."""
    problem = getattr(error, "problem", None) or type(error).__name__
    mark = getattr(error, "problem_mark", None)
    return f"{problem} at line {mark.line + 1} column {mark.column + 1}" if mark else problem
