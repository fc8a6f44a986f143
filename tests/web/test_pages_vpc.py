"""The network and storage page: the account's subnets (with the recent sessions that use them)
and S3 locations; only operators register or deregister, audited as operator changes; charlie
sees none of acme's and bob (a member) may not list them."""

from __future__ import annotations

import pytest

from controlplane.audit.models import AuditEvent
from controlplane.tenants.models import StorageLocation, Subnet
from controlplane.tenants.services import storage_location_register, subnet_register
from controlplane.training_sessions.models import Session

pytestmark = pytest.mark.django_db

SUBNET = "subnet-0a1b2c3d4e5f6a7b8"


@pytest.fixture
def network(alice) -> Session:
    subnet_register(tenant=alice.tenant, subnet_id=SUBNET, description="eu-west-1a")
    storage_location_register(tenant=alice.tenant, uri="s3://acme-ckpt/loopwright")
    return Session.objects.create(
        tenant=alice.tenant,
        platform={"vpc_config": {"subnets": [SUBNET], "security_group_ids": []}},
    )


@pytest.fixture
def operator(alice):
    alice.user.is_staff = True
    alice.user.save(update_fields=["is_staff"])
    return alice


def test_logged_out_goes_to_login(client) -> None:
    r = client.get("/vpc")
    assert r.status_code == 302 and r["Location"].startswith("/login?next=/vpc")


def test_subnets_locations_and_their_sessions(alice, network) -> None:
    page = alice.get("/vpc").content.decode()
    assert SUBNET in page and "eu-west-1a" in page and "s3://acme-ckpt/loopwright" in page
    assert f"/sessions/{network.id}" in page
    assert "Register a subnet" not in page and "Deregister" not in page  # not an operator


def test_empty_states(alice) -> None:
    page = alice.get("/vpc").content.decode()
    assert "No subnets registered" in page and "No S3 locations registered" in page


def test_only_operators_register(alice) -> None:
    r = alice.post("/vpc/subnets", {"subnet_id": SUBNET})
    assert r.status_code == 403 and not Subnet.objects.exists()
    r = alice.post("/vpc/locations", {"uri": "s3://mine"})
    assert r.status_code == 403 and not StorageLocation.objects.exists()


def test_an_operator_registers_and_deregisters(operator, charlie) -> None:
    assert "Register a subnet" in operator.get("/vpc").content.decode()
    r = operator.post("/vpc/subnets", {"subnet_id": "subnet-xyz"})
    body = r.content.decode()
    assert r.status_code == 400 and "is not a subnet id" in body
    assert 'id="subnet_subnet_id_error"' in body
    r = operator.post("/vpc/subnets", {"subnet_id": SUBNET, "description": "az a"})
    assert r.status_code == 302 and Subnet.objects.get(subnet_id=SUBNET).tenant == operator.tenant
    r = operator.post("/vpc/subnets", {"subnet_id": SUBNET})
    assert r.status_code == 400 and "already registered" in r.content.decode()
    r = operator.post("/vpc/locations", {"uri": "http://nope"})
    assert r.status_code == 400 and "is not an s3://bucket" in r.content.decode()
    storage_location_register(tenant=charlie.tenant, uri="s3://theirs")
    r = operator.post("/vpc/locations", {"uri": "s3://theirs/sub"})
    assert r.status_code == 400 and "overlaps another account" in r.content.decode()
    assert operator.post("/vpc/locations", {"uri": "s3://acme/x/"}).status_code == 302
    assert StorageLocation.objects.filter(tenant=operator.tenant, uri="s3://acme/x").exists()
    events = AuditEvent.objects.filter(tenant=operator.tenant, principal="system:operator")
    assert set(events.values_list("action", flat=True)) == {
        "vpc:RegisterSubnet",
        "storage:RegisterLocation",
    }
    assert "alice@example.com" in events.first().reason
    assert operator.post(f"/vpc/subnets/{SUBNET}/deregister").status_code == 302
    assert operator.post("/vpc/locations/deregister", {"uri": "s3://acme/x"}).status_code == 302
    assert not Subnet.objects.exists()
    assert list(StorageLocation.objects.values_list("uri", flat=True)) == ["s3://theirs"]
    # another account's entries are not found from here
    assert operator.post("/vpc/locations/deregister", {"uri": "s3://theirs"}).status_code == 404


def test_charlie_sees_nothing_of_acme(alice, charlie, network) -> None:
    page = charlie.get("/vpc").content.decode()
    assert SUBNET not in page and "acme-ckpt" not in page and network.id not in page
    charlie.user.is_staff = True
    charlie.user.save(update_fields=["is_staff"])
    assert charlie.post(f"/vpc/subnets/{SUBNET}/deregister").status_code == 404
    r = charlie.post("/vpc/locations/deregister", {"uri": "s3://acme-ckpt/loopwright"})
    assert r.status_code == 404
    assert Subnet.objects.filter(tenant=alice.tenant).exists()


def test_bob_may_not_list_the_network(bob, network) -> None:
    r = bob.get("/vpc")
    assert r.status_code == 403 and "vpc:ListSubnets" in r.content.decode()
