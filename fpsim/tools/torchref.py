"""PyTorch counterparts of fpsim's models and training steps, for the tools that time or check
fpsim against PyTorch (``fpsim bench``, ``fpsim gpu-check --torch``).  PyTorch is optional:
nothing here imports it until asked."""

from __future__ import annotations

import importlib

__all__ = ["import_torch", "mlp", "update", "tinygpt"]


def import_torch():
    """The torch module, or None where PyTorch is not installed."""
    try:
        return importlib.import_module("torch")
    except ImportError:
        return None


def mlp(torch, sizes, activation):
    """``torch.nn.Sequential`` of Linear layers of ``sizes`` with ``activation()`` between them:
    the Linears are named 0, 2, 4, ... as in fpsim's ``nn.MLP``, so state dicts carry over."""
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(torch.nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(activation())
    return torch.nn.Sequential(*layers)


def update(loss, opt, scaler=None) -> None:
    """Backward from ``loss`` and the optimizer step, through the GradScaler when there is one."""
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    else:
        loss.backward()
        opt.step()


def tinygpt(torch, vocab: int, context: int, d_model: int, n_layers: int, n_heads: int, mlp_ratio: int):
    """fpsim's ``nn.TinyGPT`` written with ``torch.nn``, the same architecture and sizes: token and
    position embeddings, ``n_layers`` pre-norm blocks (LayerNorm, causal self-attention with
    biased q, k, v and output Linears and ``scaled_dot_product_attention``; LayerNorm, a GELU
    (tanh) MLP of width ``mlp_ratio * d_model``), a final LayerNorm and an untied head without
    bias.  Returns the module; ``forward(ids)`` gives logits (batch, time, vocab)."""
    nn, F = torch.nn, torch.nn.functional

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.proj = (nn.Linear(d_model, d_model) for _ in range(4))

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = (lin(x).view(b, t, n_heads, -1).transpose(1, 2) for lin in (self.q, self.k, self.v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.proj(y.transpose(1, 2).reshape(b, t, d_model))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.attn, self.ln2 = nn.LayerNorm(d_model), Attention(), nn.LayerNorm(d_model)
            self.mlp = nn.Sequential(nn.Linear(d_model, mlp_ratio * d_model), nn.GELU(approximate="tanh"),
                                     nn.Linear(mlp_ratio * d_model, d_model))

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok_emb, self.pos_emb = nn.Embedding(vocab, d_model), nn.Embedding(context, d_model)
            self.blocks = nn.Sequential(*(Block() for _ in range(n_layers)))
            self.ln_f, self.head = nn.LayerNorm(d_model), nn.Linear(d_model, vocab, bias=False)

        def forward(self, ids):
            x = self.tok_emb(ids) + self.pos_emb(torch.arange(ids.shape[1], device=ids.device))
            return self.head(self.ln_f(self.blocks(x)))

    return GPT()
