"""The labs' own model code, copied from the positional-encoding lab, the attention lab and the PE walkthrough (shared by the tests).

Verbatim from the documents (the classes as the labs define them, and the book's data
generator), so that tests can run the labs' procedure side by side with attnlab's.
Nothing here is attnlab's: it is the reference attnlab is checked against.
"""
# ruff: noqa
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

class PositionalEncoding(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.d_model = d_model
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len).float().unsqueeze(1)
        angular_speed = torch.exp(torch.arange(0, d_model, 2).float() * (-np.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * angular_speed)
        pe[:, 1::2] = torch.cos(position * angular_speed)
        self.register_buffer('pe', pe.unsqueeze(0))
    def forward(self, x):
        return x * np.sqrt(self.d_model) + self.pe[:, :x.size(1), :]
class Attention(nn.Module):
    def __init__(self, hidden_dim, input_dim=None, proj_values=False):
        super().__init__()
        self.d_k = hidden_dim
        self.input_dim = hidden_dim if input_dim is None else input_dim
        self.proj_values = proj_values
        self.linear_query = nn.Linear(self.input_dim, hidden_dim)
        self.linear_key = nn.Linear(self.input_dim, hidden_dim)
        self.linear_value = nn.Linear(self.input_dim, hidden_dim)
        self.alphas = None
    def init_keys(self, keys):
        self.keys = keys
        self.proj_keys = self.linear_key(self.keys)
        self.values = self.linear_value(self.keys) if self.proj_values else self.keys
    def score_function(self, query):
        proj_query = self.linear_query(query)
        return torch.bmm(proj_query, self.proj_keys.permute(0, 2, 1)) / np.sqrt(self.d_k)
    def forward(self, query, mask=None):
        scores = self.score_function(query)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        alphas = F.softmax(scores, dim=-1)
        self.alphas = alphas.detach()
        return torch.bmm(alphas, self.values)
class MultiHeadAttention(nn.Module):
    def __init__(self, n_heads, d_model, input_dim=None, proj_values=True):
        super().__init__()
        self.linear_out = nn.Linear(n_heads * d_model, d_model)
        self.attn_heads = nn.ModuleList([Attention(d_model, input_dim=input_dim, proj_values=proj_values) for _ in range(n_heads)])
    def init_keys(self, key):
        for attn in self.attn_heads: attn.init_keys(key)
    @property
    def alphas(self):
        return torch.stack([attn.alphas for attn in self.attn_heads], dim=0)
    def forward(self, query, mask=None):
        return self.linear_out(torch.cat([attn(query, mask=mask) for attn in self.attn_heads], axis=-1))
class EncoderSelfAttn(nn.Module):
    def __init__(self, n_heads, d_model, ff_units, n_features=None):
        super().__init__()
        self.self_attn_heads = MultiHeadAttention(n_heads, d_model, input_dim=n_features)
        self.ffn = nn.Sequential(nn.Linear(d_model, ff_units), nn.ReLU(), nn.Linear(ff_units, d_model))
    def forward(self, query, mask=None):
        self.self_attn_heads.init_keys(query)
        return self.ffn(self.self_attn_heads(query, mask))
class DecoderSelfAttn(nn.Module):
    def __init__(self, n_heads, d_model, ff_units, n_features=None):
        super().__init__()
        self.n_features = d_model if n_features is None else n_features
        self.self_attn_heads = MultiHeadAttention(n_heads, d_model, input_dim=self.n_features)
        self.cross_attn_heads = MultiHeadAttention(n_heads, d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, ff_units), nn.ReLU(), nn.Linear(ff_units, self.n_features))
    def init_keys(self, states):
        self.cross_attn_heads.init_keys(states)
    def forward(self, query, source_mask=None, target_mask=None):
        self.self_attn_heads.init_keys(query)
        att1 = self.self_attn_heads(query, target_mask)
        att2 = self.cross_attn_heads(att1, source_mask)
        return self.ffn(att2)
class EncoderPe(nn.Module):
    def __init__(self, n_heads, d_model, ff_units, n_features=None, max_len=100):
        super().__init__()
        pe_dim = d_model if n_features is None else n_features
        self.pe = PositionalEncoding(max_len, pe_dim)
        self.layer = EncoderSelfAttn(n_heads, d_model, ff_units, n_features)
    def forward(self, query, mask=None):
        return self.layer(self.pe(query), mask)
class DecoderPe(nn.Module):
    def __init__(self, n_heads, d_model, ff_units, n_features=None, max_len=100):
        super().__init__()
        pe_dim = d_model if n_features is None else n_features
        self.pe = PositionalEncoding(max_len, pe_dim)
        self.layer = DecoderSelfAttn(n_heads, d_model, ff_units, n_features)
    def init_keys(self, states): self.layer.init_keys(states)
    def forward(self, query, source_mask=None, target_mask=None):
        return self.layer(self.pe(query), source_mask, target_mask)
class EncoderDecoderSelfAttn(nn.Module):
    def __init__(self, encoder, decoder, input_len, target_len):
        super().__init__()
        self.encoder = encoder; self.decoder = decoder
        self.input_len = input_len; self.target_len = target_len
        self.trg_masks = self.subsequent_mask(self.target_len)
    @staticmethod
    def subsequent_mask(size):
        return (1 - torch.triu(torch.ones((1, size, size)), diagonal=1))
    def encode(self, source_seq, source_mask):
        self.decoder.init_keys(self.encoder(source_seq, source_mask))
    def decode(self, shifted_target_seq, source_mask=None, target_mask=None):
        return self.decoder(shifted_target_seq, source_mask=source_mask, target_mask=target_mask)
    def predict(self, source_seq, source_mask):
        inputs = source_seq[:, -1:]
        for i in range(self.target_len):
            out = self.decode(inputs, source_mask, self.trg_masks[:, :i+1, :i+1])
            out = torch.cat([inputs, out[:, -1:, :]], dim=-2)
            inputs = out.detach()
        return inputs[:, 1:, :]
    def forward(self, X, source_mask=None):
        self.trg_masks = self.trg_masks.type_as(X).bool()
        source_seq = X[:, :self.input_len, :]
        self.encode(source_seq, source_mask)
        if self.training:
            return self.decode(X[:, self.input_len-1:-1, :], source_mask, self.trg_masks)
        return self.predict(source_seq, source_mask)
# --- seed 003: GRU encoder/decoder and the attention decoder -------------------------------------
class Encoder(nn.Module):
    def __init__(self, n_features, hidden_dim):
        super().__init__()
        self.hidden_dim = hidden_dim; self.n_features = n_features; self.hidden = None
        self.basic_rnn = nn.GRU(self.n_features, self.hidden_dim, batch_first=True)
    def forward(self, X):
        rnn_out, self.hidden = self.basic_rnn(X)
        return rnn_out  # N, L, F
class Decoder(nn.Module):
    def __init__(self, n_features, hidden_dim):
        super().__init__()
        self.hidden_dim = hidden_dim; self.n_features = n_features; self.hidden = None
        self.basic_rnn = nn.GRU(self.n_features, self.hidden_dim, batch_first=True)
        self.regression = nn.Linear(self.hidden_dim, self.n_features)
    def init_hidden(self, hidden_seq):
        self.hidden = hidden_seq[:, -1:].permute(1, 0, 2)
    def forward(self, X):
        out, self.hidden = self.basic_rnn(X, self.hidden)
        return self.regression(out[:, -1:]).view(-1, 1, self.n_features)
class DecoderAttn(nn.Module):
    def __init__(self, n_features, hidden_dim):
        super().__init__()
        self.hidden_dim = hidden_dim; self.n_features = n_features; self.hidden = None
        self.basic_rnn = nn.GRU(self.n_features, self.hidden_dim, batch_first=True)
        self.attn = Attention(self.hidden_dim)
        self.regression = nn.Linear(2 * self.hidden_dim, self.n_features)
    def init_hidden(self, hidden_seq):
        self.attn.init_keys(hidden_seq)
        self.hidden = hidden_seq[:, -1:].permute(1, 0, 2)
    def forward(self, X, mask=None):
        out, self.hidden = self.basic_rnn(X, self.hidden)
        query = out[:, -1:]
        context = self.attn(query, mask=mask)
        return self.regression(torch.cat([context, query], axis=-1)).view(-1, 1, self.n_features)
class EncoderDecoder(nn.Module):
    def __init__(self, encoder, decoder, input_len, target_len, teacher_forcing_prob=0.5):
        super().__init__()
        self.encoder = encoder; self.decoder = decoder
        self.input_len = input_len; self.target_len = target_len
        self.teacher_forcing_prob = teacher_forcing_prob; self.outputs = None
    def init_outputs(self, batch_size):
        device = next(self.parameters()).device
        self.outputs = torch.zeros(batch_size, self.target_len, self.encoder.n_features).to(device)
    def store_output(self, i, out):
        self.outputs[:, i:i+1, :] = out
    def forward(self, X):
        source_seq = X[:, :self.input_len, :]
        target_seq = X[:, self.input_len:, :]
        self.init_outputs(X.shape[0])
        hidden_seq = self.encoder(source_seq)
        self.decoder.init_hidden(hidden_seq)
        dec_inputs = source_seq[:, -1:, :]
        for i in range(self.target_len):
            out = self.decoder(dec_inputs)
            self.store_output(i, out)
            prob = self.teacher_forcing_prob if self.training else 0
            dec_inputs = target_seq[:, i:i+1, :] if torch.rand(1) <= prob else out
        return self.outputs
class EncoderDecoderAttn(EncoderDecoder):
    def __init__(self, encoder, decoder, input_len, target_len, teacher_forcing_prob=0.5):
        super().__init__(encoder, decoder, input_len, target_len, teacher_forcing_prob)
        self.alphas = None
    def init_outputs(self, batch_size):
        device = next(self.parameters()).device
        self.outputs = torch.zeros(batch_size, self.target_len, self.encoder.n_features).to(device)
        self.alphas = torch.zeros(batch_size, self.target_len, self.input_len).to(device)
    def store_output(self, i, out):
        self.outputs[:, i:i+1, :] = out
        self.alphas[:, i:i+1, :] = self.decoder.attn.alphas

def generate_sequences(n=128, variable_len=False, seed=13):
    basic_corners = np.array([[-1, -1], [-1, 1], [1, 1], [1, -1]])
    np.random.seed(seed)
    bases = np.random.randint(4, size=n)
    lengths = np.random.randint(3, size=n) + 2 if variable_len else [4] * n
    directions = np.random.randint(2, size=n)
    points = [basic_corners[[(b + i) % 4 for i in range(4)]][slice(None, None, d*2-1)][:l] + np.random.randn(l, 2) * 0.1 for b, d, l in zip(bases, directions, lengths)]
    return points, directions


# The PE walkthrough's PositionalEncoding (its comments left out); it shares the lab's class name.
class WalkthroughPositionalEncoding(nn.Module):
    def __init__(self, encoding_size: int, dropout_prob: float, max_len: int = 5000):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout_prob, inplace=False)
        positional_encoding = torch.zeros(size=(max_len, encoding_size), dtype=torch.float)
        positional_encoding_numerators = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        numerators_in_exponent = torch.arange(0, encoding_size, 2, dtype=torch.float)
        positional_encoding_denominators = torch.exp(numerators_in_exponent * (-math.log(10000.0) / encoding_size))
        positional_encoding[:, 0::2] = torch.sin(positional_encoding_numerators * positional_encoding_denominators)
        positional_encoding[:, 1::2] = torch.cos(positional_encoding_numerators * positional_encoding_denominators)
        positional_encoding = positional_encoding.unsqueeze(0)
        self.register_buffer('positional_encoding', positional_encoding)

    def forward(self, input: Tensor) -> Tensor:
        input = input + self.positional_encoding[:, :input.size(1)].requires_grad_(False)
        return self.dropout(input)
