"""Azure Quantum targets as hqflow backends (``azure:<target>``), over the azure-quantum SDK."""
