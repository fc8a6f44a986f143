"""The three people as holders of access keys: alice's acts as her tenant's session role,
bob's as himself, charlie's as his own tenant's role."""

from __future__ import annotations

import pytest

from tests import people as people_
from tests.support.access_keys import role_key, user_key


@pytest.fixture
def holders(db):
    alice, bob, charlie = people_.three_people()
    return role_key(alice), user_key(bob), role_key(charlie)
