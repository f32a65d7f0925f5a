"""What several systems share: versioned archives, task FLOPs, the shared estimators."""
