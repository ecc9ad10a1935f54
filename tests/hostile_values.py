"""Hostile values for the naming and value rules: objects whose every operation may raise."""

from __future__ import annotations

import numbers
from fractions import Fraction

import numpy as np

from trainreport._record._values import (
    UNCONVERTIBLE,
)


class ItemRaises:
    """Tensor-like whose .item() fails (a multi-element tensor, a freed buffer)."""

    def item(self) -> float:
        raise RuntimeError("a Tensor with 2 elements cannot be converted to Scalar")


class FakeTensor:
    """A 0-d tensor stand-in: .item() returns a plain number."""

    def __init__(self, value: object) -> None:
        self._value = value

    def item(self) -> object:
        return self._value


class GetattrRaises:
    """Attribute lookup of anything missing raises something other than AttributeError."""

    def __getattr__(self, name: str) -> object:
        raise RuntimeError(f"no {name} for you")


class GetattributeRaises:
    """Every attribute access raises, including __class__ (used by isinstance)."""

    def __getattribute__(self, name: str) -> object:
        raise RuntimeError(f"no {name} for you")


class ClassPropertyRaises:
    """isinstance() consults __class__, which raises here."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        raise RuntimeError("no class")


class ReprRaises:
    """str() and repr() both raise."""

    def __str__(self) -> str:
        raise RuntimeError("no str")

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


class BadReal:
    """Registered as a numbers.Real, but float() of it raises."""

    def __float__(self) -> float:
        raise ValueError("not today")


numbers.Real.register(BadReal)


class BadIntegral:
    """Registered as a numbers.Integral, but int() of it raises."""

    def __int__(self) -> int:
        raise ValueError("not today")

    def __float__(self) -> float:
        raise ValueError("not today")


numbers.Integral.register(BadIntegral)


class ItemReturnsHostile:
    """.item() succeeds but returns an object whose attribute access raises."""

    def item(self) -> object:
        return GetattributeRaises()


HOSTILE: list[object] = [
    ItemRaises(),
    GetattrRaises(),
    GetattributeRaises(),
    ClassPropertyRaises(),
    ReprRaises(),
    BadReal(),
    BadIntegral(),
    ItemReturnsHostile(),
    FakeTensor(GetattributeRaises()),
    UNCONVERTIBLE,
    Fraction(10**400, 3),
    np.array([1.0, 2.0]),
    np.array(["a"]),
]
