"""laketrain's trainer: ``python -m training`` trains on one dataset version; ``training.api``
is the public API for training code of your own (docs/training-api.md)."""
