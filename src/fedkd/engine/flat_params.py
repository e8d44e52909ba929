"""K clients' copies of a model's trainable parameters as the batched trainer holds them: flat
(K, P) rows for clipping and the optimizer, and the folded network's contiguous blocks."""

from __future__ import annotations

import torch

from fedkd.engine.folding import folded_shape


class FlatParams:
    """K clients' copies of a model's trainable parameters, in two layouts over one set of names:
    ``rows`` (K, P), one client per row (clipping, optimizer), and ``blocks``, each parameter's
    K copies contiguous (the folded network's weights), refreshed from ``rows`` by one gather.
    Linear weights are held transposed in both (``FoldedLinear``); ``fill`` and ``export``
    translate."""

    def __init__(self, named: dict[str, torch.Tensor], k: int, kinds: dict, dtype, device):
        self.k, self.names = k, list(named)
        sizes = [named[n].numel() for n in self.names]
        self.size = sum(sizes)
        self.rows = torch.zeros(k, self.size, dtype=dtype, device=device)
        self.blocks = torch.zeros(k * self.size, dtype=dtype, device=device)
        self.per_client, self.folded, self.row_views = {}, {}, {}
        self.transposed = {n for n in self.names if kinds[n] == "linear_weight"}
        self.shapes = {n: named[n].shape for n in self.names}
        perm, offset = [], 0
        for n, numel in zip(self.names, sizes, strict=True):
            shape = named[n].shape
            block = self.blocks[k * offset : k * (offset + numel)]
            self.folded[n] = block.view(folded_shape(shape, k, kinds[n]))
            self.per_client[n] = (
                self.folded[n].transpose(1, 2) if n in self.transposed else block.view(k, *shape)
            )
            self.row_views[n] = self.rows[:, offset : offset + numel]
            # blocks[k*offset + c*numel + i] = rows[c, offset + i]
            perm.append(
                (torch.arange(k).unsqueeze(1) * self.size + offset + torch.arange(numel)).flatten()
            )
            offset += numel
        self.perm = torch.cat(perm).to(device)

    def _row(self, n: str, t: torch.Tensor) -> torch.Tensor:
        t = t.detach()
        return (t.t() if n in self.transposed else t).reshape(-1)

    def fill(self, named: dict[str, torch.Tensor]) -> None:
        """Every client's row := the given parameters (e.g. the global model's)."""
        for n in self.names:
            self.row_views[n].copy_(self._row(n, named[n]).unsqueeze(0).expand(self.k, -1))
        self.sync()

    def fill_rows(self, states: list[dict[str, torch.Tensor]]) -> None:
        for c, state in enumerate(states):
            for n in self.names:
                self.row_views[n][c].copy_(self._row(n, state[n]))
        self.sync()

    def export(self, c: int) -> dict[str, torch.Tensor]:
        """Client ``c``'s parameters in their own shapes (views of its row)."""
        out = {}
        for n in self.names:
            row, shape = self.row_views[n][c], self.shapes[n]
            out[n] = row.view(shape[1], shape[0]).t() if n in self.transposed else row.view(shape)
        return out

    def sync(self) -> None:
        torch.index_select(self.rows.view(-1), 0, self.perm, out=self.blocks)

    def gather_grads(self, grads: list[torch.Tensor]) -> torch.Tensor:
        """Gradients w.r.t. the folded parameters → (K, P) rows."""
        return torch.cat([g.reshape(self.k, -1) for g in grads], dim=1)
