"""Membership-inference attacks (registered in :data:`miaudit.registry.ATTACKS`).

An attack is a pure, vectorized function of the stored outputs: see :class:`AttackInput` and
:class:`Attack`. Higher scores mean "more likely a member".
"""

from miaudit.attacks._base import Attack, AttackInput, AttackResult

__all__ = ["Attack", "AttackInput", "AttackResult"]
