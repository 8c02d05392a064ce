"""The benchmark runs from a checkout on ``.venv``'s Spark: its sources use Spark 4.2's
read limits, so its tests are not collected in the venvs of older Spark lines."""

from spark_chkpt.runtime.spark_version import has_admission_control

collect_ignore_glob = [] if has_admission_control() else ["test_*.py"]
