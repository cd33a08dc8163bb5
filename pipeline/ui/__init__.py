"""The "Datasets" page inside the Airflow UI: an Airflow plugin mounting a FastAPI app.

``app.create_app`` builds the app (pages + JSON API) from the metadata store; ``plugin`` is the
only module that imports Airflow, to hand Airflow the app with Airflow's own auth dependency.
"""
