"""The plan overrides of an operator, resolved once: its ``plan=`` mapping, the environment's
``FFTMATVEC_PLAN`` as it was at its construction, and its tuning table's plan
(:class:`Overrides`). The planning functions read them; nothing here reads the environment."""

from __future__ import annotations

from dataclasses import dataclass

from .plan import ENV, PLAN_KEYS, parse_overrides

__all__ = ["Overrides"]


@dataclass(frozen=True)
class Overrides:
    """The plan keys set aside, resolved once: ``items`` ``(key, value, source)`` for the
    keys not ``auto`` (:data:`~fftmatvec.gpu.plan.PLAN_KEYS`), the source ``plan=``,
    ``FFTMATVEC_PLAN`` or ``tuning table``. :meth:`resolve` makes it."""

    items: tuple = ()

    @classmethod
    def resolve(cls, user=None, env=None, tuned=None) -> "Overrides":
        """The overrides of an operator: its ``plan=`` mapping or string ``user`` wins over the
        environment's value ``env`` (``FFTMATVEC_PLAN``'s text, read by the caller, or None),
        which wins over the tuning table's plan ``tuned``."""
        layers = [(parse_overrides(tuned, "the tuning table's plan"), "tuning table"),
                  (parse_overrides(env, ENV), ENV),
                  (parse_overrides(user, "plan"), "plan=")]
        chosen: dict = {}
        for values, source in layers:
            for key, value in values.items():
                chosen[key] = (value, source)
        return cls(tuple((key, *chosen[key]) for key in PLAN_KEYS
                         if key in chosen and chosen[key][0] != "auto"))

    def get(self, key: str) -> str:
        """``"auto"``, ``"0"`` or ``"1"`` for plan key ``key``."""
        for k, value, _ in self.items:
            if k == key:
                return value
        return "auto"

    def mapping(self) -> dict:
        """``{key: value}`` of the keys set aside."""
        return {k: v for k, v, _ in self.items}
