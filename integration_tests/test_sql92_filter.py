"""The Spark source's SQL92 filter (`sqlFilter`) against the broker of
tests/connector/test_sql92_filter.py holding 10,000 orders: a batch read returns exactly the
matching messages, and a malformed filter is refused at load."""

from __future__ import annotations

import pytest

from tests.broker_server.in_process_broker import InProcessBroker
from tests.connector import test_sql92_filter
from tests.connector.test_sql92_filter import EXPECTED, FILTER

orders_broker = test_sql92_filter.orders_broker   # the fixture: the 10,000 orders on an in-process broker


def test_spark_batch_read_with_sql_filter(spark, orders_broker: InProcessBroker) -> None:
    frame = (spark.read.format("rmq").option("endpoints", orders_broker.address).option("topic", "Orders")
             .option("sqlFilter", FILTER).load())
    rows = frame.select("body", "properties").collect()
    assert sorted(bytes(row.body) for row in rows) == sorted(EXPECTED)
    assert all(row.properties["region"] == "eu" for row in rows)


def test_spark_refuses_a_malformed_sql_filter_at_load(spark, orders_broker: InProcessBroker) -> None:
    with pytest.raises(Exception, match="invalid SQL92 filter at position 26"):
        (spark.read.format("rmq").option("endpoints", orders_broker.address).option("topic", "Orders")
         .option("sqlFilter", "region = 'eu' AND amount >").load())


def test_spark_sql_filter_on_properties_the_query_does_not_select(spark, orders_broker: InProcessBroker
                                                                  ) -> None:
    """The broker evaluates the filter on the stored properties; the query's columns leave them out."""
    frame = (spark.read.format("rmq").schema("queue_id int, queue_offset long, body binary")
             .option("endpoints", orders_broker.address).option("topic", "Orders").option("sqlFilter", FILTER)
             .load())
    assert frame.columns == ["queue_id", "queue_offset", "body"]
    assert sorted(bytes(row.body) for row in frame.collect()) == sorted(EXPECTED)
