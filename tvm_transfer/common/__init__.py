"""What several systems share: versioned archives, the XGBoost booster helper, the shared V/P/A
estimators."""
