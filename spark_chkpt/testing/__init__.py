"""What tests and ``make demo`` start: embedded brokers, the S3 server, the data generator
(the fail points are engine code: :mod:`spark_chkpt.failpoints`)."""
