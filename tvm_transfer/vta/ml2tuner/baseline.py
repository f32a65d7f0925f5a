"""The AutoTVM-like baseline tuner (TVM's "TVM-like approach", AutoTVM's XGBTuner) over a VTA knob space.

Per round an XGBoost ranking model on the knob values is refitted on every profile so far (invalid ones as
throughput 0); simulated annealing over the space proposes the configurations the model ranks best; the
top ``batch_size`` unvisited ones (a share ``epsilon`` replaced by random ones) are profiled.
"""

from __future__ import annotations

import numpy as np

from tenset_tools.frame import normalised_throughput
from tvm_transfer.common.estimators import PerformanceModel
from tvm_transfer.vta.ml2tuner.base import KnobTuner
from vta_ext.features import KNOB_NAMES, VISIBLE_FEATURE_NAMES

_KNOB_COLUMNS = [VISIBLE_FEATURE_NAMES.index(name) for name in KNOB_NAMES]


class BaselineTuner(KnobTuner):
    """AutoTVM-like: XGBoost rank model on knob values + simulated annealing + epsilon-greedy batches.

    Parameters
    ----------
    batch_size:
        Profiles per round (the model is refitted after each round).
    epsilon:
        Share of each batch drawn at random (AutoTVM's XGBTuner explores with 0.05).
    seed, sa_parallel, sa_steps:
        Seed of the run; annealing walkers and steps per round.
    """

    method = "baseline"

    def __init__(
        self,
        batch_size: int = 16,
        epsilon: float = 0.05,
        seed: int = 0,
        sa_parallel: int = 128,
        sa_steps: int = 80,
    ) -> None:
        super().__init__(batch_size, seed, sa_parallel, sa_steps)
        self.epsilon = epsilon

    def _round(self, round_: int, n: int) -> None:
        visited = set(self.profiled)
        if round_ == 0:
            self._profile(self._random_unvisited(n, visited), round_)
            return
        indices = np.array(list(self.profiled), dtype=np.int64)
        latencies = np.array(
            [self.profiled[i].latency if self.profiled[i].valid else np.nan for i in indices]
        )
        model = PerformanceModel(objective="rank:pairwise", seed=self.seed + round_)
        model.fit(
            self.measurer.visible(indices)[:, _KNOB_COLUMNS],
            normalised_throughput(latencies, np.zeros(len(latencies))),
        )

        def score(points: np.ndarray) -> np.ndarray:
            return model.predict(self.measurer.visible(points)[:, _KNOB_COLUMNS])

        picks = self._annealed_picks(score, n, self.epsilon, visited)
        self._profile(picks, round_)
