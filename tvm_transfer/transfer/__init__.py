"""Transfer packs: a measured corpus, cost models trained on it and a target-aware best-schedule database,
in one versioned folder (:mod:`.pack`); applying its schedules to a run (:mod:`.apply`); and the guard
that keeps a pretrained cost model from misleading a search (:mod:`.guard`)."""

from pathlib import Path

#: Where the pack shipped with the package lives; tuning uses it unless told otherwise (absent until a
#: corpus is collected: runs then go without transfer).
DEFAULT_PACK = Path(__file__).parent / "data" / "default"
