"""PySpark data source for entry logs and the analysis jobs."""
