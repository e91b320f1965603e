"""SpMM/GEMM orders of an L-layer GCN: naming, parsing, enumeration, Table IV ids. Pure; no MPI.

An order is 2L letters. ``S`` = SpMM first (``(AᵀH)W``), ``D`` = GEMM first (``Aᵀ(HW)``).
The first L letters are the forward pass of layers 1..L, the last L the backward pass in the
order it runs, layers L..1 (the RDM authors' convention: for two layers the string is
``F1 F2 B2 B1``). JSON form: ``{"forward": "DS", "backward": "DS"}``. ``FWD:BWD`` is accepted
too (``DS:DS``).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Iterator

from perfmodel.errors import PerfModelError

LETTERS = ("S", "D")


class Letters(tuple[str, ...]):
    """One letter per layer, layer 1 first: ``letters[l - 1]`` or ``letters(l)`` (1-based)."""

    def __call__(self, layer: int) -> str:
        return self[layer - 1]


@dataclass(frozen=True)
class Order:
    """One SpMM/GEMM order.

    Attributes
    ----------
    forward
        Letters for layers 1..L in the forward pass.
    backward
        Letters for layers L..1, in the order the backward pass runs.
    """

    forward: str
    backward: str

    def __post_init__(self) -> None:
        if len(self.forward) != len(self.backward) or not self.forward:
            raise PerfModelError(f"order {self.forward}:{self.backward}: expected L >= 1 forward "
                                 f"and L backward letters, got {len(self.forward)} and "
                                 f"{len(self.backward)}")
        bad = set(self.forward + self.backward) - set(LETTERS)
        if bad:
            raise PerfModelError(f"order {self.forward}:{self.backward}: expected letters S or D, "
                                 f"got {''.join(sorted(bad))}")

    @property
    def layers(self) -> int:
        return len(self.forward)

    @property
    def fwd(self) -> Letters:
        """Forward letter per layer: ``fwd(l)`` or ``fwd[l - 1]``."""
        return Letters(self.forward)

    @property
    def bwd(self) -> Letters:
        """Backward letter per layer (the string runs L..1): ``bwd(l)`` or ``bwd[l - 1]``."""
        return Letters(reversed(self.backward))

    def string(self) -> str:
        """The 2L-letter string (forward 1..L, then backward L..1)."""
        return self.forward + self.backward

    def __str__(self) -> str:
        return self.string()

    def as_dict(self) -> dict[str, str]:
        return {"forward": self.forward, "backward": self.backward}

    def table4_id(self) -> int | None:
        """The row id of the RDM paper's Table IV (two layers only; None otherwise).

        ``id = 2·[F1=D] + [F2=D] + 8·[B2=D] + 4·[B1=D]``.
        """
        if self.layers != 2:
            return None
        d = [c == "D" for c in self.string()]  # F1 F2 B2 B1
        return 2 * d[0] + d[1] + 8 * d[2] + 4 * d[3]


def parse_order(text: str, layers: int | None = None) -> Order:
    """Parse ``"DSDS"`` (2L letters) or ``"DS:DS"`` (FWD:BWD); case-insensitive.

    Raises PerfModelError with a one-line message on bad input, or when ``layers`` is given and
    the order has a different number of layers.
    """
    t = str(text).strip().upper()
    if ":" in t:
        fwd, _, bwd = t.partition(":")
    else:
        if len(t) % 2 or not t:
            raise PerfModelError(f"order {text!r}: expected 2L letters S/D (forward 1..L then "
                                 f"backward L..1) or FWD:BWD, got {len(t)} letters")
        half = len(t) // 2
        fwd, bwd = t[:half], t[half:]
    order = Order(fwd, bwd)
    if layers is not None and order.layers != layers:
        raise PerfModelError(f"order {text!r}: expected {layers} layers ({2 * layers} letters), "
                             f"got {order.layers}")
    return order


def order_from_table4(idx: int) -> Order:
    """The two-layer order of Table IV row ``idx`` (0..15)."""
    if not 0 <= idx < 16:
        raise PerfModelError(f"Table IV id {idx}: expected 0..15")
    letter = lambda bit: "D" if idx & bit else "S"  # noqa: E731
    return Order(letter(2) + letter(1), letter(8) + letter(4))


def cagnet_order(layers: int) -> Order:
    """CAGNET's order: SpMM first everywhere."""
    return Order("S" * layers, "S" * layers)


def all_orders(layers: int) -> Iterator[Order]:
    """Every order of an L-layer GCN (2^(2L) of them), forward-major, S before D."""
    if layers < 1:
        raise PerfModelError(f"layers: expected L >= 1, got {layers}")
    for letters in itertools.product(LETTERS, repeat=2 * layers):
        s = "".join(letters)
        yield Order(s[:layers], s[layers:])
