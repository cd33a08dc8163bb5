"""Airflow-side code of laketrain: the lake watcher trigger, the task bodies of the DAGs,
the trainer launchers and the dev stack behind ``make run``.

Only ``trigger.py`` (imported by the triggerer) imports Airflow at module top; the other
modules import it inside functions so that the data side stays usable without Airflow.
"""
