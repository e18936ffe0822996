"""Writes tests/fixtures/llama/ once, with Hugging Face transformers (run by hand, not by the
tests): a small random LlamaForCausalLM with kv_heads < heads and a non-default rope theta
(2 layers, width 64, 4 heads, 2 kv heads, FFN 96, vocabulary 101, theta 50000) saved as a
checkpoint directory (hf/: config.json, model.safetensors, f32), and step.safetensors: a batch
of token ids [4, 8], the logits [4, 8, 101] and one training step's gradients under the
checkpoint's names (cross-entropy of logits[:, :-1] against tokens[:, 1:], the mean over all
4 x 7 predicted tokens: transformers' own loss with labels = tokens). test_llama_hf reads it.
Usage: /work/torchenv/bin/python tests/models/make_llama_fixture.py"""
import os

import torch
import transformers
from safetensors.torch import save_file

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "llama")


def main():
    torch.manual_seed(51)
    cfg = transformers.LlamaConfig(vocab_size=101, hidden_size=64, intermediate_size=96,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=64,
                                   rms_norm_eps=1e-6, rope_theta=50000.0,
                                   tie_word_embeddings=False, attention_bias=False,
                                   mlp_bias=False)
    # initializer_range 0.02 gives near-uniform logits; a larger one makes every layer matter.
    cfg.initializer_range = 0.2
    model = transformers.LlamaForCausalLM(cfg).float()
    # rmsnorm weights start at ones: make them random so their mapping is checked too.
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(1 + 0.3 * torch.randn_like(p))
    model.eval()  # no dropout (Llama has none anyway)
    model.save_pretrained(os.path.join(OUT, "hf"), safe_serialization=True)

    tokens = torch.randint(0, 101, (4, 8), generator=torch.Generator().manual_seed(7))
    out = model(input_ids=tokens, labels=tokens)
    out.loss.backward()
    tensors = {"tokens": tokens.to(torch.int32), "logits": out.logits.detach().contiguous(),
               "loss": out.loss.detach().reshape(1)}
    for n, p in model.named_parameters():
        tensors["grad." + n] = p.grad.contiguous()
    save_file(tensors, os.path.join(OUT, "step.safetensors"))
    print("transformers", transformers.__version__, "loss", out.loss.item())


if __name__ == "__main__":
    main()
