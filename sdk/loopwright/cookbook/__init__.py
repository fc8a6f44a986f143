"""Training recipes written on the public SDK: each is a flat loop you can read, copy and change.

Run one with ``python -m loopwright.cookbook.<recipe> --help`` (sft, math_rl, code_rl,
preference, distill); the shared pieces (chat rendering, datums, advantages, metrics,
checkpoints, configs) are importable on their own.
"""
