# Notices from the operations table itself (PostgreSQL only): a new pending operation wakes its
# worker (NOTIFY loopwright_wake, '<queue>'), and an operation that becomes done or failed wakes
# the requests waiting for it (NOTIFY loopwright_ops, a JSON object with its id and, when it
# fits, its state). Both are delivered at the commit that wrote the row.

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION loopwright_operation_wake() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('loopwright_wake', w.queue) FROM fleet_worker w WHERE w.id = NEW.worker_id;
    RETURN NULL;
END $$ LANGUAGE plpgsql;

CREATE OR REPLACE FUNCTION loopwright_operation_finished() RETURNS trigger AS $$
DECLARE
    note text;
BEGIN
    note := json_build_object(
        'id', NEW.id, 'status', NEW.status, 'result', NEW.result,
        'error', NEW.error, 'category', NEW.error_category
    )::text;
    IF octet_length(note) > 7900 THEN  -- a notice holds at most 8000 bytes
        note := json_build_object('id', NEW.id)::text;
    END IF;
    PERFORM pg_notify('loopwright_ops', note);
    RETURN NULL;
END $$ LANGUAGE plpgsql;

CREATE TRIGGER loopwright_operation_wake
    AFTER INSERT ON training_sessions_operation
    FOR EACH ROW WHEN (NEW.status = 'pending' AND NEW.worker_id IS NOT NULL)
    EXECUTE FUNCTION loopwright_operation_wake();

CREATE TRIGGER loopwright_operation_finished_insert
    AFTER INSERT ON training_sessions_operation
    FOR EACH ROW WHEN (NEW.status IN ('done', 'failed'))
    EXECUTE FUNCTION loopwright_operation_finished();

CREATE TRIGGER loopwright_operation_finished_update
    AFTER UPDATE OF status ON training_sessions_operation
    FOR EACH ROW WHEN (NEW.status IN ('done', 'failed') AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION loopwright_operation_finished();
"""

DROP = """
DROP TRIGGER IF EXISTS loopwright_operation_finished_update ON training_sessions_operation;
DROP TRIGGER IF EXISTS loopwright_operation_finished_insert ON training_sessions_operation;
DROP TRIGGER IF EXISTS loopwright_operation_wake ON training_sessions_operation;
DROP FUNCTION IF EXISTS loopwright_operation_finished();
DROP FUNCTION IF EXISTS loopwright_operation_wake();
"""


def _on_postgresql(sql):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql, None)

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("training_sessions", "0005_checkpoint_storage"),
        ("fleet", "0002_worker_networks"),
    ]

    operations = [migrations.RunPython(_on_postgresql(CREATE), _on_postgresql(DROP))]
