"""laketrain's trainer: ``python -m training`` trains on one dataset version."""
