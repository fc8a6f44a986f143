"""Several rank processes serving one session: data parallel (a ModelHost per rank, gradients
all-reduced) and sharded bases (FSDP2 over the group, base frozen, LoRA replicated)."""

from .data_parallel import DataParallel
from .group import RankGroup
from .sharding import is_sharded, shard_base
from .split import split_by_tokens

__all__ = ["DataParallel", "RankGroup", "is_sharded", "shard_base", "split_by_tokens"]
