"""attend_shared's merge of a shared prefix's attention with each row's own (shared_prefix.py) against softmax
attention over the concatenated columns: one case worked by hand, and random cases (float32 and bfloat16) where
only some rows hold the prefix and some own columns are masked out."""

import pytest
import torch

from mgrpo_actors.engines.shared_prefix import PrefixView, SharedPrefix, attend_shared


def test_a_case_worked_by_hand():
    # 1 row, 1 kv head, 1 query q = 1, head dim 1, scale 1.
    # prefix: keys (1, 0), values (2, -1) -> scores (1, 0)
    #   lse_p = log(e + 1) = 1.3132616875182228, o_p = (2e - 1) / (e + 1) = 1.1931757358900146
    # own: keys (0.5, 3), values (4, 100), column 2 masked out -> score 0.5
    #   lse_o = 0.5, o_o = 4
    # w = sigmoid(lse_o - lse_p) = sigmoid(-0.8132616875182228) = 0.30719588571849843
    # o = w * 4 + (1 - w) * 1.1931757358900146 = 2.055420601759454
    #   (directly: (2e - 1 + 4 e^0.5) / (e + 1 + e^0.5) = 2.0554206017594536)
    prefix = SharedPrefix.from_parts([7, 8], [torch.tensor([[[1.0], [0.0]]])], [torch.tensor([[[2.0], [-1.0]]])])
    query = torch.tensor([[[[1.0]]]])
    key, value = torch.tensor([[[[0.5], [3.0]]]]), torch.tensor([[[[4.0], [100.0]]]])
    mask = torch.tensor([[[[True, False]]]])
    out = attend_shared(PrefixView(prefix, None), 0, query, key, value, mask, 1.0)
    assert out.dtype == torch.float32 and out.shape == (1, 1, 1, 1)
    torch.testing.assert_close(out, torch.tensor([[[[2.055420601759454]]]]), atol=1e-6, rtol=0)


def _reference(query, key, value, mask, prefix_keys, prefix_values, holds, scale):
    """Softmax over [prefix columns, own columns] for the rows in `holds`, over own columns only otherwise (float64)."""
    out = []
    for r in range(query.shape[0]):
        q, k, v = query[r].double(), key[r].double(), value[r].double()
        scores = (q @ k.transpose(-1, -2) * scale).masked_fill(~mask[r], float("-inf"))
        if r in holds:
            prefix_scores = q @ prefix_keys.double().transpose(-1, -2) * scale
            scores, v = torch.cat([prefix_scores, scores], -1), torch.cat([prefix_values.double(), v], -2)
        out.append(torch.softmax(scores, -1) @ v)
    return torch.stack(out)


# bfloat16: the reference takes the same bf16-rounded inputs, so what differs is the kernel's own rounding: its
# own-part output comes back in bf16 (relative error up to 2^-9), the merged output is rounded to bf16 again
# (2^-9 more), and the CPU kernel rounds the softmax's probabilities to bf16 before multiplying them by the values.
# With outputs of magnitude <= ~2 that is a few units of 2^-9 * 2 ~ 4e-3 each; 2e-2 absolute + 1e-2 relative covers it.
@pytest.mark.parametrize(("dtype", "atol", "rtol"), [(torch.float32, 1e-5, 0.0), (torch.bfloat16, 2e-2, 1e-2)])
def test_rows_without_the_prefix_attend_only_their_own_columns(dtype, atol, rtol):
    gen = torch.Generator().manual_seed(0)
    rows, kv_heads, queries, dim, cols, length, scale = 3, 2, 3, 8, 5, 4, 8**-0.5
    query, key, value = (torch.randn(rows, kv_heads, n, dim, generator=gen).to(dtype) for n in (queries, cols, cols))
    prefix_keys, prefix_values = (torch.randn(kv_heads, length, dim, generator=gen).to(dtype) for _ in range(2))
    mask = torch.rand(rows, 1, queries, cols, generator=gen) > 0.3
    mask[..., 0] = True  # every query attends at least one own column
    assert not mask.all()
    prefix = SharedPrefix.from_parts(range(length), [prefix_keys], [prefix_values])
    out = attend_shared(PrefixView(prefix, torch.tensor([0, 2])), 0, query, key, value, mask, scale)
    assert out.dtype == dtype and out.shape == query.shape
    expected = _reference(query, key, value, mask, prefix_keys, prefix_values, {0, 2}, scale)
    torch.testing.assert_close(out.double(), expected, atol=atol, rtol=rtol)
    own_only = _reference(query, key, value, mask, prefix_keys, prefix_values, set(), scale)
    assert not torch.allclose(out[0].double(), own_only[0], atol=1e-2)  # the prefix does change rows 0 and 2
