"""Search strategies: trace replay and repair, the Gaussian-copula transfer search."""
