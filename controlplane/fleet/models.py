"""Workers register the base model they pin, with its tokenizer files, and the networks they reach;
then they hold a lease in the database that their heartbeat renews."""

from __future__ import annotations

from django.db import models


class BaseModel(models.Model):
    """A base model some worker has served; clients fetch its tokenizer from here."""

    name = models.CharField(max_length=200, primary_key=True)
    description = models.TextField(blank=True)
    context_length = models.PositiveIntegerField()
    # token ids run from 0 to vocab_size - 1 (the output embedding's rows); None: not known yet
    vocab_size = models.PositiveIntegerField(null=True, blank=True)
    # Images: None, it takes none (a text model); n > 0, each image is n tokens; 0, it takes
    # images whose token count depends on the image (only its worker can tell).
    image_tokens = models.PositiveIntegerField(null=True, blank=True)
    chat_template = models.TextField(null=True, blank=True)
    tokenizer_files = models.JSONField(default=dict)  # file name -> text
    tokenizer_path = models.CharField(max_length=1000, blank=True)  # on the worker's disk
    # What one rank needs to hold it whole with one adapter and a pass's working memory, as its
    # workers compute it (docs/scaling.md); None: not reported yet.
    memory_bytes = models.BigIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)


class ReplicaGroup(models.Model):
    """Workers of one base model that serve training models together (data parallel): rank 0,
    the coordinator, claims the models' operations; the followers join each one's collectives.

    Placement forms a group from live workers and records each member's ``rank``; the
    coordinator opens the rendezvous (a TCP store on its ``address``) and announces it here; the
    followers read it and join. A group is never repaired: when a member is lost it is broken,
    its models go back to placement and a new group forms from live workers.
    """

    class State(models.TextChoices):
        FORMING = "forming"  # members named, not all joined yet
        READY = "ready"  # every rank joined: operations run
        BROKEN = "broken"  # a member was lost or left: nothing runs on it again

    base_model = models.ForeignKey(BaseModel, on_delete=models.PROTECT, related_name="groups")
    world_size = models.PositiveSmallIntegerField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.FORMING)
    rendezvous = models.CharField(max_length=300, blank=True)  # tcp://host:port, from rank 0
    # The base is sharded over the members (FSDP): every model and sampler placed on the
    # coordinator runs on the whole group. Such a group ends only when a member is lost.
    sharded = models.BooleanField(default=False)
    status_reason = models.TextField(blank=True)  # why it broke, for people
    created_at = models.DateTimeField(auto_now_add=True)
    ready_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["state", "base_model"], name="replica_group_state_idx")]

    def __str__(self) -> str:
        return f"group {self.pk} ({self.base_model_id} x{self.world_size}, {self.state})"


class Worker(models.Model):
    class State(models.TextChoices):
        ACTIVE = "active"
        GONE = "gone"  # stopped on its own, after handing its models over
        DEAD = "dead"  # silent past its lease, or started again: declared dead, work moved

    name = models.CharField(max_length=200, unique=True)
    queue = models.CharField(max_length=200)
    base_model = models.ForeignKey(BaseModel, on_delete=models.PROTECT, related_name="workers")
    capacity = models.PositiveIntegerField(help_text="training models it will hold at once")
    device = models.CharField(max_length=100, default="cpu")
    # The networks it reaches; none: the open network (it serves only sessions without a VPC).
    subnet_ids = models.JSONField(default=list, blank=True)
    security_group_ids = models.JSONField(default=list, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.ACTIVE)
    started_at = models.DateTimeField()
    last_heartbeat_at = models.DateTimeField()
    # The lease: the worker is live while it holds one that has not run out. Each registration
    # and each declaration of death starts a new generation; every claim and completion names
    # the generation it was made under, so a worker declared dead can change nothing.
    generation = models.BigIntegerField(default=0)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # Where the other ranks of a group reach it when it is a coordinator (a host name or IP).
    address = models.CharField(max_length=200, blank=True)
    # The replica group it belongs to now, and its rank there (0: the coordinator). A follower
    # (rank > 0) serves only its group; a coordinator also serves single-worker models.
    group = models.ForeignKey(
        ReplicaGroup, null=True, blank=True, on_delete=models.SET_NULL, related_name="members"
    )
    rank = models.PositiveSmallIntegerField(null=True, blank=True)
    # Its memory (the accelerator's, or what it was given), and the ranks its base must be
    # sharded over at that size: 1, it holds the base whole; more, it serves only as a member of
    # a sharded group of that many workers.
    memory_bytes = models.BigIntegerField(null=True, blank=True)
    shard_ranks = models.PositiveSmallIntegerField(default=1)

    class Meta:
        indexes = [models.Index(fields=["state", "lease_expires_at"], name="worker_lease_idx")]

    def __str__(self) -> str:
        return f"{self.name} ({self.base_model_id})"
