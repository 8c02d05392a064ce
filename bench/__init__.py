"""The project's benchmark: the pipeline's rate as a ratio of the raw client's, in one run."""
