"""The shop's generated accounts: an email and a password each, the same for the same seed.

The addresses use the reserved ``.test`` domain, so none can name a real mailbox or host.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass

__all__ = ["ACCOUNTS", "Account", "accounts"]

ACCOUNTS = 40
_FIRST = ("ava", "ben", "chloe", "dev", "elin", "farid", "greta", "hugo", "ines", "jonas", "kira", "liam",
          "maya", "nils", "olga", "pavel", "quinn", "rosa", "sami", "tara", "umar", "vera", "wen", "yara")
_LAST = ("nilsen", "okafor", "lindqvist", "moreau", "tanaka", "kowalski", "haddad", "silva", "byrne",
         "novak", "ferreira", "iversen", "costa", "weber", "rahman", "duarte")
_WORDS = ("amber", "falcon", "cedar", "pebble", "lantern", "river", "copper", "meadow", "violet", "harbor",
          "thistle", "comet", "willow", "granite", "saffron", "orchid")


@dataclass(frozen=True)
class Account:
    email: str
    password: str
    full_name: str


@functools.lru_cache(maxsize=4)
def accounts(seed: int) -> tuple[Account, ...]:
    """The accounts of `seed`, emails unique, in a fixed order."""
    rng = random.Random(f"shop-accounts:{seed}")
    made: dict[str, Account] = {}
    while len(made) < ACCOUNTS:
        first, last = rng.choice(_FIRST), rng.choice(_LAST)
        email = f"{first}.{last}@shop.test"
        if email in made:
            continue
        password = f"{rng.choice(_WORDS)}-{rng.choice(_WORDS)}-{rng.randint(10, 99)}"
        made[email] = Account(email, password, f"{first.title()} {last.title()}")
    return tuple(made.values())
