"""The trainer's exit codes: the contract with the orchestrator (pipeline/orchestration/launchers.py
maps them to task outcomes)."""

EXIT_OK = 0
EXIT_FAILED = 1  # anything else: Airflow retries
EXIT_CONFIG = 2  # bad config: no retry
EXIT_DATA = 3  # the data was refused (version not found, leakage, label mismatch): no retry
EXIT_PREEMPTED = 75  # stopped by SIGTERM after a checkpoint: a retry resumes from it
