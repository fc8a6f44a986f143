"""An independent reference for the vision-language engine: plain transformers + peft and the
model's own processor, one datum at a time, sharing nothing with the engine's image handling."""

from __future__ import annotations

import io

import numpy as np
import peft
import torch
from PIL import Image, ImageDraw
from transformers import AutoModelForImageTextToText, AutoProcessor

from workers.engine.host import ModelHost


def shape_png(kind: str, colour: tuple[int, int, int], size: tuple[int, int] = (48, 40)) -> bytes:
    """A PNG of one filled shape on white."""
    image = Image.new("RGB", size, (255, 255, 255))
    draw = ImageDraw.Draw(image)
    box = (6, 6, size[0] - 6, size[1] - 6)
    if kind == "circle":
        draw.ellipse(box, fill=colour)
    elif kind == "square":
        draw.rectangle(box, fill=colour)
    else:
        draw.polygon([(box[0], box[3]), (box[2], box[3]), ((box[0] + box[2]) // 2, box[1])], colour)
    buf = io.BytesIO()
    image.save(buf, "PNG")
    return buf.getvalue()


# LLaVA's layers by name, written out here rather than taken from the engine: every linear
# layer of its language model, its unembedding, and (``projector``) its projector's two layers.
LLAVA_LANGUAGE = (
    r".*language_model\..*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)|lm_head"
)
LLAVA_PROJECTOR = r"multi_modal_projector\.linear_[12]"


def plain_vlm_peft(
    host: ModelHost, model_id: str, *, projector: bool | None = None
) -> tuple[torch.nn.Module, dict]:
    """A fresh VLM from disk with the host adapter's weights, through peft's own loader; its
    targets the engine's own choice, or (``projector`` given) LLaVA's layers named here."""
    base = AutoModelForImageTextToText.from_pretrained(host.materialized.path, dtype=torch.float32)
    cfg = host.pool.peft_config(model_id)
    targets = cfg.target_modules
    if projector is not None:
        targets = rf"^(.*\.)?({LLAVA_LANGUAGE}{'|' + LLAVA_PROJECTOR if projector else ''})$"
    model = peft.get_peft_model(
        base, peft.LoraConfig(r=cfg.r, lora_alpha=cfg.lora_alpha, target_modules=targets)
    )
    state = {k: v.detach().float() for k, v in host.pool.state_dict(model_id).items()}
    peft.set_peft_model_state_dict(model, state)
    params = {n.replace(".default.", "."): p for n, p in model.named_parameters() if "lora_" in n}
    return model, params


def processed(host: ModelHost, before: list[int], png: bytes, after: list[int]):
    """Token ids and pixel values as the model's own processor makes them of text around one
    image (the processor expands its image token itself)."""
    processor = AutoProcessor.from_pretrained(host.materialized.path)
    image = Image.open(io.BytesIO(png)).convert("RGB")
    out = processor(text=["<image>"], images=[image], return_tensors="pt")
    ids = [*before, *out["input_ids"][0].tolist(), *after]
    return ids, out["pixel_values"]


def vlm_logprobs(model, ids: list[int], targets: list[int], pixel_values) -> torch.Tensor:
    logits = model(input_ids=torch.tensor([ids]), pixel_values=pixel_values).logits[0]
    logp = torch.log_softmax(logits.double(), dim=-1)
    return logp[torch.arange(len(targets)), torch.tensor(targets)]


def random_targets(rng: np.random.Generator, n: int) -> list[int]:
    return rng.integers(0, 256, size=n).tolist()
