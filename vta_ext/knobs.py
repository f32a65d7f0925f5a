"""The knob space of VTA's AutoTVM templates.

conv2d: ``tile_b, tile_h, tile_w, tile_ci, tile_co`` (divisor splits) and ``oc_nthread, h_nthread`` in
{1, 2}; dense: ``tile_b, tile_ci, tile_co, oc_nthread``. A split knob's value here is the *inner* factor,
i.e. the tile size: batch blocks (``tile_b``), output rows (``tile_h``), output columns (``tile_w``),
input-channel blocks (``tile_ci``) and output-channel blocks (``tile_co``) per tile. As in VTA's conv2d
template, ``tile_b`` is part of the space but the conv2d schedule does not split the batch.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np

from vta_ext.hw import HwConfig
from vta_ext.workloads import Conv2D, VtaWorkload

Knobs = dict[str, int]
NTHREAD_OPTIONS = (1, 2)


class KnobError(ValueError):
    """A knob setting outside a layer's knob space: an unknown or missing name, a value that is not an
    integer, or one that is not among the knob's options (the message names the knob and its options)."""


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


class KnobSpace:
    """All knob settings of one workload on one hardware config, in a fixed (mixed-radix) order."""

    def __init__(self, workload: VtaWorkload, hw: HwConfig) -> None:
        self.workload = workload
        batch_blocks = max(1, workload.batch // hw.BATCH)
        if isinstance(workload, Conv2D):
            self.options: dict[str, list[int]] = {
                "tile_b": divisors(batch_blocks),
                "tile_h": divisors(workload.out_height),
                "tile_w": divisors(workload.out_width),
                "tile_ci": divisors(max(1, workload.in_channels // hw.BLOCK_IN)),
                "tile_co": divisors(max(1, workload.out_channels // hw.BLOCK_OUT)),
                "oc_nthread": list(NTHREAD_OPTIONS),
                "h_nthread": list(NTHREAD_OPTIONS),
            }
        else:
            self.options = {
                "tile_b": divisors(batch_blocks),
                "tile_ci": divisors(max(1, workload.in_features // hw.BLOCK_IN)),
                "tile_co": divisors(max(1, workload.out_features // hw.BLOCK_OUT)),
                "oc_nthread": list(NTHREAD_OPTIONS),
            }
        self.names = list(self.options)
        self._radices = [len(v) for v in self.options.values()]

    def __len__(self) -> int:
        return int(np.prod(self._radices))

    def __iter__(self) -> Iterator[Knobs]:
        for values in itertools.product(*self.options.values()):
            yield dict(zip(self.names, values, strict=True))

    def point(self, index: int) -> Knobs:
        """The knob setting at ``index`` (the last knob varies fastest, as :meth:`__iter__`)."""
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} outside a space of {len(self)}")
        knobs = {}
        for name, radix in zip(reversed(self.names), reversed(self._radices), strict=True):
            index, digit = divmod(index, radix)
            knobs[name] = self.options[name][digit]
        return {name: knobs[name] for name in self.names}

    def check(self, knobs: object) -> Knobs:
        """``knobs`` when it is a setting of this space (every knob named, each an integer among its
        options); raises :class:`KnobError` naming the first knob that is not."""
        if not isinstance(knobs, dict):
            raise KnobError(f"knobs must be an object of knob values, not {type(knobs).__name__}")
        unknown = sorted(set(knobs) - set(self.names))
        if unknown:
            raise KnobError(
                f"unknown knob(s) {', '.join(map(str, unknown))}; {self.workload.name} has {self.names}"
            )
        for name in self.names:
            value = knobs.get(name)
            if name not in knobs:
                raise KnobError(f"knob {name} is missing; its options: {self.options[name]}")
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise KnobError(f"knob {name}={value!r} is not an integer; its options: {self.options[name]}")
            if value not in self.options[name]:
                raise KnobError(f"knob {name}={value!r} is not one of its options {self.options[name]}")
        return knobs

    def index(self, knobs: Knobs) -> int:
        """Inverse of :meth:`point`; raises ``ValueError`` for a setting outside the space."""
        index = 0
        for name, radix in zip(self.names, self._radices, strict=True):
            index = index * radix + self.options[name].index(knobs[name])
        return index

    def sample(self, count: int, rng: np.random.Generator) -> list[Knobs]:
        """``count`` distinct settings drawn uniformly (all of them if the space is smaller)."""
        picks = rng.choice(len(self), size=min(count, len(self)), replace=False)
        return [self.point(int(i)) for i in picks]
