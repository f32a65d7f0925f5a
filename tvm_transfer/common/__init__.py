"""What several systems share: versioned archives, hyper-parameters, the XGBoost booster helper, the
shared V/P/A estimators, exceptions told in one line."""
