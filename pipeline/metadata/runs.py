"""Training models: runs and their checkpoints. Owned by the trainer work; migration 0003."""
