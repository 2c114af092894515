"""Compatibility name of :mod:`rmq.registrar` (the broker side's registration)."""

from rmq.registrar import BrokerRegistrar, RegisterResult, RegistrationError, register_period

__all__ = ["BrokerRegistrar", "RegisterResult", "RegistrationError", "register_period"]
