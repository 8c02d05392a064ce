"""The Spark-runtime plumbing under the features: the Python Spark's workers run
(``interpreter``), the JVM artifacts (``jars``), what ``register()`` sets on a session
(``session_defaults``), a worker's heap frozen (``worker_heap``), a failure's first line
(``report``) and the exit hook that lets pyarrow's threads finish (``teardown``)."""
