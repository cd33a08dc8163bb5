"""laketrain's data side: settings, lake ledger, datasets and the metadata store.

No Airflow and no torch at module top anywhere in this package: the trainer image
carries no Airflow and the Airflow image carries no torch.
"""

__version__ = "0.1.0"
