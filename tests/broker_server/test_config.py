from pathlib import Path

import pytest

from rmq.broker_server.config import BrokerConfig, NameServerConfig, load_config
from rmq.broker_server.errors import UserError
from rmq.store import BrokerRole, FlushDiskType


def test_defaults_follow_the_spec() -> None:
    config = load_config(BrokerConfig, None, {})
    assert config.listen == "127.0.0.1:10911"
    assert config.client_expiry_ms == 120000
    assert config.rebalance_lock_max_live_time_ms == 60000
    assert config.hold_check_interval_ms == 5000
    assert config.short_polling_time_ms == 1000
    assert config.message_delay_level.split()[0] == "1s" and len(config.message_delay_level.split()) == 18
    assert load_config(NameServerConfig, None, {}).listen == "127.0.0.1:9876"


def test_yaml_file_with_flags_on_top(tmp_path: Path) -> None:
    path = tmp_path / "broker.yaml"
    path.write_text(
        "broker_name: from-file\nflush: sync\nclient_expiry_ms: 1500\nmessage_delay_level: 1s 2s\n"
        "store:\n  mapped_file_size_commit_log: 65536\n"
    )
    config = load_config(BrokerConfig, str(path), {"broker_name": "from-flag", "flush": None})
    assert config.broker_name == "from-flag"
    assert config.flush is FlushDiskType.SYNC
    assert config.client_expiry_ms == 1500
    assert config.store == {"mapped_file_size_commit_log": 65536}


def test_json_file(tmp_path: Path) -> None:
    path = tmp_path / "broker.json"
    path.write_text('{"rebalance_lock_max_live_time_ms": 700, "namesrv": "127.0.0.1:9876,127.0.0.1:9877"}')
    config = load_config(BrokerConfig, str(path), {})
    assert config.rebalance_lock_max_live_time_ms == 700
    assert config.namesrv_addresses == ["127.0.0.1:9876", "127.0.0.1:9877"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("colour: red\n", "unknown key 'colour'"),
        ("client_expiry_ms: soon\n", "client_expiry_ms must be an integer"),
        ("client_expiry_ms: true\n", "client_expiry_ms must be an integer"),
        ("client_expiry_ms: -5\n", "client_expiry_ms must be positive"),
        ("flush: sometimes\n", "flush must be 'sync' or 'async'"),
        ("listen: nowhere\n", "listen must be HOST:PORT"),
        ("listen: 127.0.0.1:70000\n", "listen must be HOST:PORT"),
        ("message_delay_level: 1s 2x\n", "delay level '2x'"),
        ("[1, 2]\n", "must hold a mapping"),
        ("a: [\n", "not valid YAML"),
    ],
)
def test_bad_values_are_one_clear_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "broker.yaml"
    path.write_text(content)
    with pytest.raises(UserError, match=message.replace("[", r"\[")) as error:
        load_config(BrokerConfig, str(path), {})
    assert "\n" not in str(error.value)


def test_missing_file_and_bad_flag() -> None:
    with pytest.raises(UserError, match="cannot read config file /no/such.yaml"):
        load_config(BrokerConfig, "/no/such.yaml", {})
    with pytest.raises(UserError, match="broker name"):
        load_config(BrokerConfig, None, {"broker_name": "a b"})


@pytest.mark.parametrize(
    ("store", "message"),
    [
        ("colour: red", "store: unknown key 'colour' (known: access_message_in_memory_max_ratio, "),
        ("store_dir: /elsewhere", "unknown key 'store_dir'"),
        ("file_reserved_time_hours: abc", "store.file_reserved_time_hours must be a number, not 'abc'"),
        ("flush_interval_commit_log_ms: -5", "store.flush_interval_commit_log_ms must be positive, not -5"),
        ("flush_interval_commit_log_ms: 1.5", "store.flush_interval_commit_log_ms must be an integer"),
        ("disk_max_used_space_ratio: 500", "store.disk_max_used_space_ratio must be from 10 to 95, not 500"),
        ("disk_space_clean_forcibly_ratio: 2", "disk_space_clean_forcibly_ratio must be from 0.01 to 1.5"),
        ("message_index_enable: 1", "store.message_index_enable must be a bool"),
        ("delete_when: '25'", "store.delete_when must be 'now' or hours of the day"),
        ("mapped_file_size_commit_log: 10", "mapped_file_size_commit_log must be from 1024"),
    ],
)
def test_bad_store_settings_are_one_clear_line_naming_the_key(tmp_path: Path, store: str,
                                                              message: str) -> None:
    path = tmp_path / "broker.yaml"
    path.write_text(f"store:\n  {store}\n")
    with pytest.raises(UserError, match=message.replace("(", r"\(")) as error:
        load_config(BrokerConfig, str(path), {})
    assert "\n" not in str(error.value)


def test_good_store_settings_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "broker.yaml"
    path.write_text("store:\n  file_reserved_time_hours: 1\n  disk_max_used_space_ratio: 90\n"
                    "  delete_when: '04;16'\n  flush_commit_log_least_pages: 0\n")
    config = load_config(BrokerConfig, str(path), {})
    assert config.store == {"file_reserved_time_hours": 1, "disk_max_used_space_ratio": 90,
                            "delete_when": "04;16", "flush_commit_log_least_pages": 0}


def test_store_settings_given_without_a_file_are_checked_like_the_top_level_keys() -> None:
    """A `store:` section set by flags or code (not read from a file) is checked at start too,
    one line naming the key, not a TypeError from the store's constructor."""
    with pytest.raises(UserError, match=r"^store: unknown key 'no_such_setting'"):
        BrokerConfig(store={"no_such_setting": 1}).validate()
    with pytest.raises(UserError, match=r"^store\.disk_max_used_space_ratio must be from 10 to 95, not 500$"):
        BrokerConfig(store={"disk_max_used_space_ratio": 500}).validate()


def test_role_and_flush_are_enums_whether_given_as_text_or_as_members() -> None:
    config = BrokerConfig(broker_role="SYNC_MASTER", flush="sync")   # type: ignore[arg-type]
    assert (config.broker_role, config.flush) == (BrokerRole.SYNC_MASTER, FlushDiskType.SYNC)
    assert BrokerConfig(broker_role=BrokerRole.SLAVE).broker_role is BrokerRole.SLAVE
    with pytest.raises(UserError, match=r"^flush must be 'sync' or 'async', not 'sometimes'$"):
        BrokerConfig(flush="sometimes")   # type: ignore[arg-type]
