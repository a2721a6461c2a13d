"""The pipeline's jobs: each takes the ``entrylog`` DataFrame (and what else it needs), writes
Parquet under the output directory and returns a small summary for the terminal."""
