"""The corpus of the default transfer pack, and the one command that builds the pack from it.

The corpus is every task of real networks (batch 1) tuned by MetaSchedule's evolutionary search under
its ``XGBModel``, on the CPU of each machine that collected it and on two portable CPU targets, plus the
network baseline runs (``benchmarks.networks``, TVM alone). The networks of :data:`HELD_OUT` never enter
it: the transfer benchmarks tune them (``benchmarks.transfer_networks``, ``benchmarks.transfer_operators``),
and the pack's manifest lists them as excluded.

The machine (and its CPU) changes over time, and a CPU's pass can only be measured on that CPU: ``collect
--pass host:2`` adds this machine's pass, and ``pack`` adds the work dirs to the shipped pack, which keeps
the passes of earlier machines.

    nice -n 19 python -m benchmarks.corpus collect > work/corpus.log 2>&1 &   # resumable; hours on 2 cores
    nice -n 19 python -m benchmarks.corpus collect --pass host:2 > work/corpus.log 2>&1 &   # this CPU only
    nice -n 19 python -m benchmarks.corpus collect --network torchvision:vit_b_32   # one network, all passes
    python -m benchmarks.corpus pack       # (make default-pack) -> tvm_transfer/transfer/data/default
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

#: Networks whose tasks make the corpus: residual, inverted-bottleneck (with squeeze-excitation), RegNet,
#: ConvNeXt, vision-transformer and language-model families; three of them also at a smaller input size,
#: and ViT-B also in patches of 32 (other shapes: a transformer's sequence length is its image's patch
#: count plus one); BERT-large's layer at sequence 128, a language model's power-of-two token count.
NETWORKS = (
    "torchvision:resnet18",
    "torchvision:resnet50",
    "torchvision:mobilenet_v2",
    "torchvision:mobilenet_v3_large",
    "torchvision:regnet_x_400mf",
    "torchvision:convnext_tiny",
    "torchvision:vit_b_16",
    "torchvision:resnet50@1,3,160,160",
    "torchvision:mobilenet_v2@1,3,160,160",
    "torchvision:vit_b_16@1,3,160,160",
    "torchvision:vit_b_32",
    "bert_large_layer",
)
#: The convolutional networks of :data:`NETWORKS` again with their convolutions channels last (``@nhwc``):
#: a layout changes every convolution's task, so that a pack serves a layout only with records of it.
CHANNELS_LAST = (
    "torchvision:resnet18@nhwc",
    "torchvision:resnet50@nhwc",
    "torchvision:mobilenet_v2@nhwc",
    "torchvision:mobilenet_v3_large@nhwc",
    "torchvision:regnet_x_400mf@nhwc",
    "torchvision:convnext_tiny@nhwc",
    "torchvision:resnet50@1,3,160,160@nhwc",
    "torchvision:mobilenet_v2@1,3,160,160@nhwc",
)
#: Never in the corpus (at any shape or layout): an EfficientNet and a BERT-base encoder, one per family a
#: user is likely to bring; each in the layout the commands' default (``--conv-layout AUTO``) imports it in.
HELD_OUT = ("torchvision:efficientnet_b0@nhwc", "bert_base")
#: Never in the corpus either, and not held out: the development networks the transfer policy's settings
#: are chosen on, so that the held-out ones judge the choice.
DEV_NETWORKS = ("torchvision:mnasnet1_0", "bert_small_layer")
#: Development networks whose weights outgrow a CPU's last-level cache, where those of
#: :data:`DEV_NETWORKS` fit: for the settings that depend on where a layer's weights come from. A
#: transformer encoder and a convolutional network (263 MB of weights), since their layers differ in
#: how large the weights are against the activations.
DEV_LARGE_WEIGHTS = ("bert_small", "torchvision:wide_resnet50_2")
#: The passes of the collection, in order: ``(target, measurements per network, search population)``.
#: This machine's CPU first and widest; then two portable targets that run on every x86-64 CPU seen here,
#: with a smaller share and population (the evolutionary search, not the measurement, is most of a
#: batch's time), enough for the model's breadth and for users tuning for those targets.
PASSES = (("host:2", 300, 128), ("x86-64-v3:2", 200, 64), ("x86-64-v2:2", 200, 64))
WORK_DIR = Path("work/corpus")
#: Further runs packed with the corpus when present: the network baseline (TVM alone on this CPU).
EXTRA_SOURCES = (Path("work/bench_networks"),)


def collect_corpus(
    work_dir: Path = WORK_DIR, passes: tuple[str, ...] = (), networks: tuple[str, ...] = ()
) -> None:
    """Run the passes of :data:`PASSES` named by their target specs in ``passes`` (all when empty) over
    the ``networks`` of :data:`NETWORKS` (all when empty) in ``work_dir``, resuming what it holds; each
    network gets its pass's share whatever the others hold."""
    from tvm_transfer.tuning.collect import collect, parse_targets
    from tvm_transfer.tuning.session import TuneOptions

    unknown = sorted(set(passes) - {spec for spec, _, _ in PASSES})
    if unknown:
        raise SystemExit(f"no pass {', '.join(unknown)}; the passes are {', '.join(s for s, _, _ in PASSES)}")
    corpus = NETWORKS + CHANNELS_LAST
    strangers = sorted(set(networks) - set(corpus))
    if strangers:
        raise SystemExit(f"{', '.join(strangers)} not in the corpus networks: {', '.join(corpus)}")
    networks = networks or corpus
    for spec, trials_per_network, population in PASSES:
        if passes and spec not in passes:
            continue
        # Batches of 8 reach every task of a network of up to ~37 tasks within a 300-measurement share (the
        # gradient scheduler gives each task one batch before it favours any).
        options = TuneOptions(trials_per_iter=8, population_size=population)
        budget = trials_per_network * len(networks)
        collect(networks, parse_targets(spec), budget, work_dir, options=options, cost_model="tvm-xgb")


def build_default_pack(out: Path | None = None, work_dir: Path = WORK_DIR, fresh: bool = False) -> None:
    """Build the default pack (``tvm_transfer/transfer/data/default`` unless ``out``) from the corpus and
    the extra sources, held-out networks excluded, with an XGBoost model trained on the whole corpus.

    Unless ``fresh``, the pack shipped in the package is extended: the machine changes between sessions and
    a corpus pass collected on another CPU lives on only in that pack. Extending again with the same work
    dirs adds only what they measured since (a candidate counts once)."""
    from tvm_transfer.transfer import DEFAULT_PACK
    from tvm_transfer.transfer.pack import TransferPack, build_pack

    sources = [p for p in (work_dir, *EXTRA_SOURCES) if p.is_dir()]
    if not sources:
        raise SystemExit(f"no corpus under {work_dir}: run `python -m benchmarks.corpus collect` first")
    base = None if fresh or not DEFAULT_PACK.is_dir() else TransferPack.open(DEFAULT_PACK)
    pack = build_pack(
        sources,
        out or DEFAULT_PACK,
        top_k=3,
        models=["xgboost"],
        exclude_networks=HELD_OUT,
        base=base,
        progress=lambda line: print(line, file=sys.stderr),
    )
    print(pack.describe())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("step", choices=("collect", "pack"))
    parser.add_argument("--work-dir", type=Path, default=WORK_DIR, help="root of the corpus work dirs")
    parser.add_argument(
        "--pass",
        dest="passes",
        action="append",
        default=[],
        metavar="TARGET",
        help="collect only this pass of PASSES (e.g. host:2; repeatable; default: all)",
    )
    parser.add_argument(
        "--network",
        dest="networks",
        action="append",
        default=[],
        metavar="NAME",
        help="collect only this network of NETWORKS (repeatable; default: all)",
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="pack: build from the work dirs alone, not extending the shipped pack",
    )
    parser.add_argument("-o", "--out", type=Path, help="pack folder (default: the package's default pack)")
    args = parser.parse_args(argv)
    if args.step == "collect":
        collect_corpus(args.work_dir, tuple(args.passes), tuple(args.networks))
    else:
        build_default_pack(args.out, args.work_dir, args.fresh)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
