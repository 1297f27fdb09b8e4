"""PositionalEncoding and LearnedPositionalEncoding: the labs' numbers and module behaviour."""

import math

import pytest
import torch
from torch import nn

from attnlab.encodings import LearnedPositionalEncoding, PositionalEncoding, sinusoidal

SOURCE_SEQ = torch.tensor([[[-1.0, -1.0], [-1.0, 1.0]]])  # the positional-encoding lab's source square, [1, 2, 2]


def test_pe_lab_pe_buffer_and_posenc_output():
    posenc = PositionalEncoding(2, 2)
    assert list(posenc.parameters()) == []
    assert list(posenc.state_dict()) == ["pe"]
    torch.testing.assert_close(posenc.pe, torch.tensor([[[0.0, 1.0], [0.8415, 0.5403]]]), atol=5e-5, rtol=0)
    assert not posenc.pe.requires_grad
    expected_sum = torch.tensor([[[-1.0, 0.0], [-0.1585, 1.5403]]])
    torch.testing.assert_close(SOURCE_SEQ + posenc.pe, expected_sum, atol=5e-5, rtol=0)
    torch.testing.assert_close(
        posenc(SOURCE_SEQ), torch.tensor([[[-1.4142, -0.4142], [-0.5727, 1.9545]]]), atol=5e-5, rtol=0
    )


def test_scale_input_off_reproduces_the_d2l_chapter_and_the_pe_walkthrough():
    # The PE walkthrough: input arange(128).reshape(2, 4, 16) plus the table, no scaling.
    x = torch.arange(128, dtype=torch.float32).reshape(2, 4, 16)
    pe = PositionalEncoding(5000, 16, scale_input=False)
    torch.testing.assert_close(pe(x), x + sinusoidal(4, 16))


def test_dropout_comes_after_the_addition():
    # The PE walkthrough (dropout 0.2): a kept element is (x + pe) / 0.8, e.g. output[0][0][1] = 2.5.
    x = torch.arange(128, dtype=torch.float32).reshape(2, 4, 16)
    pe = PositionalEncoding(100, 16, dropout=0.2, scale_input=False)
    out = pe.train()(x)
    kept = out != 0
    assert 0 < kept.float().mean() < 1
    torch.testing.assert_close(out[kept], ((x + sinusoidal(4, 16)) / 0.8)[kept])
    if kept[0, 0, 1]:
        assert out[0, 0, 1].item() == pytest.approx(2.5)
    torch.testing.assert_close(pe.eval()(x), x + sinusoidal(4, 16))


def test_longer_than_max_len_extends_itself_without_touching_the_state_dict():
    pe = PositionalEncoding(4, 8)
    out = pe(torch.zeros(2, 11, 8))
    torch.testing.assert_close(out, sinusoidal(11, 8).expand(2, 11, 8))
    assert pe.state_dict()["pe"].shape == (1, 4, 8)
    # A fresh module of the same max_len still loads the state dict.
    PositionalEncoding(4, 8).load_state_dict(pe.state_dict())


def test_offset_encodes_later_positions():
    pe = PositionalEncoding(10, 6, scale_input=False)
    x = torch.zeros(1, 3, 6)
    torch.testing.assert_close(pe(x, offset=5), sinusoidal(8, 6)[5:].unsqueeze(0))
    torch.testing.assert_close(pe(x, offset=9), sinusoidal(12, 6)[9:].unsqueeze(0))


def test_odd_d_model_and_dtype_follow_the_input():
    pe = PositionalEncoding(10, 5)
    x = torch.randn(3, 7, 5, dtype=torch.float64)
    out = pe(x)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, x * math.sqrt(5) + sinusoidal(7, 5).double())
    assert pe(torch.randn(1, 4, 5).to(torch.bfloat16)).dtype == torch.bfloat16


def test_moves_with_the_module_and_has_no_gradient():
    pe = PositionalEncoding(8, 4).double()
    assert pe.pe.dtype == torch.float64
    x = torch.randn(2, 8, 4, dtype=torch.float64, requires_grad=True)
    pe(x).sum().backward()
    torch.testing.assert_close(x.grad, torch.full_like(x, math.sqrt(4)))


@pytest.mark.parametrize(
    "make, exc, words",
    [
        (lambda: PositionalEncoding(0, 8), ValueError, "max_len"),
        (lambda: PositionalEncoding(10, 0), ValueError, "d_model"),
        (lambda: PositionalEncoding(10, 8, dropout=1.0), ValueError, "dropout"),
        (lambda: PositionalEncoding(10, 8, layout="nope"), ValueError, "nope"),
        (lambda: PositionalEncoding(10, 8)(torch.zeros(2, 3, 7)), ValueError, r"\[B, L, 8\]"),
        (lambda: PositionalEncoding(10, 8)(torch.zeros(3, 8)), ValueError, r"\[3, 8\]"),
        (lambda: PositionalEncoding(10, 8)(torch.zeros(1, 3, 8, dtype=torch.long)), TypeError, "dtype"),
        (lambda: PositionalEncoding(10, 8)(torch.zeros(1, 3, 8), offset=-2), ValueError, "offset"),
    ],
)
def test_positional_bad_input(make, exc, words):
    with pytest.raises(exc, match=words):
        make()


def test_learned_is_trainable_and_refuses_positions_past_max_len():
    enc = LearnedPositionalEncoding(6, 4)
    assert isinstance(enc.pe, nn.Parameter) and enc.pe.shape == (1, 6, 4)
    x = torch.randn(2, 6, 4)
    enc(x).pow(2).sum().backward()
    assert enc.pe.grad is not None and enc.pe.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="max_len=6"):
        enc(torch.randn(2, 7, 4))
    with pytest.raises(ValueError, match="offset 3"):
        enc(torch.randn(2, 4, 4), offset=3)


def test_learned_init_options():
    torch.testing.assert_close(
        LearnedPositionalEncoding(5, 4, init="sinusoidal").pe.detach()[0], sinusoidal(5, 4)
    )
    normal = LearnedPositionalEncoding(2000, 16, std=0.02).pe.detach()
    assert abs(normal.std().item() - 0.02) < 1e-3
    with pytest.raises(ValueError, match="init"):
        LearnedPositionalEncoding(5, 4, init="zeros")
