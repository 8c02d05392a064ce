"""Two Delta tables compared at equal source offsets (``spark-chkpt diff``)."""
