"""A code rollout with the check_solution turn, driven by a scripted sampler (no server)."""

from __future__ import annotations

from dataclasses import dataclass, field

from loopwright.cookbook.code_problems import PROBLEMS
from loopwright.cookbook.code_tasks import (
    NO_CODE_REWARD,
    CodeProblem,
    check_solution_message,
    first_messages,
    rollout_group,
)
from loopwright.cookbook.datums import group_relative_advantages
from loopwright.cookbook.renderers import render_prompt
from loopwright.cookbook.sandbox import SandboxLimits
from loopwright.types import SampledSequence, SampleResponse, SamplingParams

from .chat_tokenizers import tiny_tokenizer

WRONG = "Sure.\n```python\ndef add(a, b):\n    return a - b\n```"
RIGHT = "Fixed:\n```python\ndef add(a, b):\n    return a + b\n```"


class Done:
    def __init__(self, value: SampleResponse) -> None:
        self.value = value

    def result(self) -> SampleResponse:
        return self.value


@dataclass
class ScriptedSampler:
    """Answers each request with the next scripted texts, and records the prompts it got."""

    script: list[list[str]]
    prompts: list[list[int]] = field(default_factory=list)

    def sample(self, prompt, num_samples: int = 1, sampling_params: SamplingParams | None = None):
        tokenizer = tiny_tokenizer()
        texts = self.script.pop(0)
        assert len(texts) == num_samples
        self.prompts.append(list(prompt))
        sequences = []
        for text in texts:
            tokens = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]
            sequences.append(
                SampledSequence(tokens=tokens, logprobs=[-0.5] * len(tokens), stop_reason="stop")
            )
        return Done(SampleResponse(sequences=sequences))


def test_two_turn_rollout_with_the_tool() -> None:
    tokenizer = tiny_tokenizer()
    problem = CodeProblem.from_record(PROBLEMS[0])  # add(a, b)
    sampler = ScriptedSampler([[WRONG, "I cannot write code."], [RIGHT]])
    group = rollout_group(
        sampler,  # type: ignore[arg-type]
        tokenizer,
        problem,
        version=3,
        group_size=2,
        params=SamplingParams(max_tokens=64),
        two_turn=True,
        limits=SandboxLimits(timeout_s=10),
    )
    first, second = group.rollouts
    assert (first.turns, first.passed, first.reward) == (2, True, 1.0)  # revised after the tool
    assert (second.turns, second.has_code, second.reward) == (1, False, NO_CODE_REWARD)
    assert group.version == 3

    # the second turn's context is the conversation with the tool's answer, in chat format
    messages = first_messages(problem)
    tool = check_solution_message(tokenizer, "")
    assert tool["role"] == "tool"
    context = sampler.prompts[1]
    assert context[: len(sampler.prompts[0])] == sampler.prompts[0]
    shown = tokenizer.decode(context)
    assert "<s>tool\ncheck_solution results:\n0/2 tests passed." in shown
    assert "FAIL: assert add(1, 2) == 3" in shown
    tool_text = shown[shown.index("check_solution results:") :].split("</s>")[0]
    rebuilt = render_prompt(
        tokenizer,
        [
            *messages,
            {"role": "assistant", "content": WRONG},
            {"role": "tool", "content": tool_text},
        ],
    )
    assert context == rebuilt

    # only the sampled turns carry the advantage
    advantages = group_relative_advantages([r.reward for r in group.rollouts])
    datum = group.datums(advantages)[0]
    weights = datum.loss_fn_inputs["advantages"].tolist()
    sampled = sum(len(s.tokens) for s in first.segments if s.sampled)
    assert sum(1 for w in weights if w != 0.0) == sampled
    assert set(weights) == {0.0, advantages[0]}
    assert datum.loss_fn_inputs["target_tokens"].tolist()[-1] == tokenizer.eos_token_id


def test_single_turn_rollout_grades_the_first_answer() -> None:
    problem = CodeProblem.from_record(PROBLEMS[0])
    sampler = ScriptedSampler([[RIGHT]])
    group = rollout_group(
        sampler,  # type: ignore[arg-type]
        tiny_tokenizer(),
        problem,
        version=0,
        group_size=1,
        params=SamplingParams(max_tokens=64),
        two_turn=False,
        limits=SandboxLimits(timeout_s=10),
    )
    assert [(r.turns, r.reward) for r in group.rollouts] == [(1, 1.0)]
    assert len(sampler.prompts) == 1
