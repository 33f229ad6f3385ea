"""Membership-inference attacks (registered in :data:`miaudit.registry.ATTACKS`).

An attack is a pure, vectorized function of the stored outputs: see :class:`AttackInput` and
:class:`Attack`. Higher scores mean "more likely a member". :func:`evaluate` runs a list of attack
specs over arrays in memory (no files, no models).
"""

from miaudit.attacks._base import Attack, AttackInput, AttackResult
from miaudit.attacks.suite import evaluate

__all__ = ["Attack", "AttackInput", "AttackResult", "evaluate"]
