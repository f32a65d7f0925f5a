"""Tutorial: adapt a performance model across a change of feature extractor with ModelX.

On the dataset shipped with the package (``tenset_tools/data/collected_cpu.parquet``):

1. train a source model on one CPU target (``llvm/znver4/2``) described by MetaSchedule's per-store
   features (328 columns), then keep it frozen;
2. adapt it to another CPU target (``llvm/x86-64-v3/1``) described by another extractor, pooled schedule
   traces (78 columns, no name in common), from a few labelled records (``--fraction``);
3. compare it on the other records of that target with the zero-shot source model and a model trained on
   the few records alone (MSE and TenSet's ranking metrics), print the Grassmann transfer distance, and
   save and reload the adapted model.

Takes about a minute on 2 cores::

    python tutorials/modelx.py
    python tutorials/modelx.py --fraction 0.1 --mode align
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from tenset_tools import SHIPPED_DATASET
from tenset_tools.schema import read_dataset
from tvm_transfer.hetero import (
    ModelX,
    SourceModel,
    TargetOnly,
    ZeroShot,
    labelled_rows,
    sample_rows,
    scores,
    transfer_distance,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fraction", type=float, default=0.05, help="share of target records to adapt on")
    parser.add_argument("--mode", choices=("align", "residual", "both"), default="both")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    frame = read_dataset(SHIPPED_DATASET)
    X_source, y_source, _ = labelled_rows(frame[frame["target_id"] == "llvm/znver4/2"], "kernel")
    X_target, y_target, records = labelled_rows(frame[frame["target_id"] == "llvm/x86-64-v3/1"], "trace")
    print(f"source: {X_source.shape[0]} records x {X_source.shape[1]} columns ({X_source.columns[0]}, ...)")
    print(f"target: {X_target.shape[0]} records x {X_target.shape[1]} columns ({X_target.columns[0]}, ...)")

    # 1. The source model: fitted once, frozen afterwards.
    source = SourceModel(seed=args.seed).fit(X_source, y_source)

    # 2. A few labelled target records adapt it; the rest are held out.
    few, rest = sample_rows(len(X_target), args.fraction, args.seed)
    adapted = ModelX(source, mode=args.mode, seed=args.seed).fit(X_target.iloc[few], y_target[few])
    print(f"adapted on {len(few)} records in {adapted.fit_seconds_:.1f} s")

    # 3. Scores on held-out records, against the zero-shot source model and a target-only model.
    held, held_y, held_records = X_target.iloc[rest], y_target[rest], records.iloc[rest]
    contenders = {
        "ModelX": adapted,
        "zero-shot": ZeroShot(source).fit(X_target),
        "target-only": TargetOnly(seed=args.seed).fit(X_target.iloc[few], y_target[few]),
    }
    print(f"{'model':12s} {'MSE':>8s} {'pairwise':>9s} {'peak@1':>7s} {'peak@5':>7s}")
    for name, model in contenders.items():
        s = scores(held_records, held_y, model.predict(held))
        print(
            f"{name:12s} {s['mse']:8.4f} {s['pairwise_accuracy']:9.3f} {s['peak@1']:7.3f} {s['peak@5']:7.3f}"
        )

    # The transfer distance (radians) in the source model's latent space, before and after alignment.
    if args.mode != "residual":
        before = transfer_distance(contenders["zero-shot"], X_source, X_target, k=3)
        after = transfer_distance(adapted, X_source, X_target, k=3)
        print(f"Grassmann distance: zero-shot {before:.3f}, aligned {after:.3f}")

    # Saved models are versioned, checksummed archives; loading checks the source model it was adapted from.
    with tempfile.TemporaryDirectory() as work:
        path = Path(work) / "adapted.model"
        adapted.save(path)
        again = ModelX.load(path, source_model=source)
        print(f"reloaded: {again.n_features_in_} target columns, first {again.feature_names_in_[:2]}")


if __name__ == "__main__":
    main()
