"""What tests share, each defined once: the people as API callers (``callers``), the in-process
worker on the tiny model (``tiny_worker``), the wire protocol's bodies and calls (``wire``),
quotas (``quotas``), access keys (``access_keys``), the dashboard's clients and rows
(``pages``), the SDK's datums (``data``) and the SDK served in process (``sdk_transport``), and
the fixtures built on them (``fixtures``, a pytest plugin that ``tests/conftest.py``
registers)."""
