"""The lake side: walking the lake, hashing files, and the ledger scan."""
