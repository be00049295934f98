"""The Spark data source `rmq` (docs/manual/spark.md): stream and batch
readers, the partition reader run on executors, the writer, and the source's options. Built on
the client SDK in `rmq.connector`; the only part of the connector that imports pyspark.
Register it with `from rmq.connector import register; register(spark)`."""
