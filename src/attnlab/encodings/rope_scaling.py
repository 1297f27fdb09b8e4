"""RoPE scaling as transformers defines it: a ``rope_parameters`` dict to frequencies and an attention factor.

The keys and formulas are those of transformers 5.23 (``modeling_rope_utils.py``:
``ROPE_INIT_FUNCTIONS`` and ``RotaryEmbeddingConfigMixin``), computed here in
float64. With ``d = int(head_dim * partial_rotary_factor)`` rotated features,
``b`` the base (``rope_theta``) and ``theta_i = b ** (-2i / d)`` (RoFormer eq. 15):

* ``"default"``: ``theta_i``.
* ``"linear"``: ``theta_i / factor``, position interpolation (Chen et al. 2023,
  arXiv:2306.15595; kaiokendev); ``_compute_linear_scaling_rope_parameters``.
* ``"dynamic"``: dynamic NTK (bloc97 and emozilla, 2023): the base becomes
  ``b * (factor * L / M - (factor - 1)) ** (d / (d - 2))`` with ``L = max(seq_len, M)``,
  ``M = max_position_embeddings``; ``_compute_dynamic_ntk_parameters``.
* ``"yarn"``: YaRN (Peng et al. 2023, arXiv:2309.00071, §3.2-3.4;
  ``_compute_yarn_parameters``): pair ``i`` blends ``theta_i / factor`` and ``theta_i``
  by a ramp that is 0 below pair ``low`` and 1 above pair ``high``, the pairs that turn
  ``beta_fast`` (default 32) and ``beta_slow`` (default 1) times over the original length
  ``O``: ``d * ln(O / (2 pi beta)) / (2 ln b)``, rounded outwards unless ``truncate`` is
  False; attention factor ``0.1 ln(factor) + 1`` (or ``mscale(factor, mscale) /
  mscale(factor, mscale_all_dim)`` when both are set and non-zero, DeepSeek-V2), 1 for
  ``factor <= 1``. transformers' quirks, kept: ``O`` is ``original_max_position_embeddings``
  or, when absent, ``max_position_embeddings``; ``factor: None`` means ``M / O``; a
  ``beta_fast`` or ``beta_slow`` of 0 means its default.
* ``"longrope"``: LongRoPE (Ding et al. 2024, arXiv:2402.13753; Phi-3;
  ``_compute_longrope_parameters``): ``theta_i / ext_i`` with ``ext = long_factor`` when
  ``seq_len > O``, else ``short_factor``; attention factor ``sqrt(1 + ln(factor) / ln(O))``
  (1 for ``factor <= 1``), ``factor`` defaulting to ``M / O``.
* ``"llama3"``: Llama 3.1 (Meta, 2024; ``_compute_llama3_parameters``): with wavelength
  ``w_i = 2 pi / theta_i``, ``theta_i / factor`` where ``w_i > O / low_freq_factor``,
  ``theta_i`` where ``w_i < O / high_freq_factor``, and between them
  ``(1 - s) theta_i / factor + s theta_i``, ``s = (O / w_i - low) / (high - low)``.
* ``"proportional"``: Gemma 4's global layers (``_compute_proportional_rope_parameters``):
  the first ``int(partial_rotary_factor * head_dim // 2)`` pairs keep the speeds of a
  full-width rotary, ``b ** (-2i / head_dim)``, the other pairs get speed 0 (they pass
  through), all divided by ``factor`` (default 1); ``head_dim / 2`` speeds in all.

``rope_theta`` and ``partial_rotary_factor`` may sit in the dict, as transformers 5 puts
them there, or be given as arguments (``base``, ``partial_rotary_factor``). The dict's
value wins over the argument's default (10000.0, 1.0); an argument set to anything else
must agree with it. The old key name ``"type"`` is read as ``"rope_type"``; a missing
``rope_type`` is ``"default"``.

Length-dependent types and the key/value cache. "dynamic" and "longrope" choose their
frequencies by a sequence length. transformers (``dynamic_rope_update`` around
``LlamaRotaryEmbedding.forward``) takes a call's length to be ``max(position_ids) + 1``.
For "longrope" the whole call uses ``long_factor`` when that length exceeds ``O``. For
"dynamic" the module keeps state: it recomputes the frequencies for the length when the
length exceeds the longest seen so far (``max_seq_len_cached``), returns to the original
ones when a call is shorter than ``M`` after having grown past it, and otherwise keeps the
frequencies of the longest length seen. So one full pass over ``L > M`` tokens turns every
token with the frequencies of ``L``, while generation with a cache turns the prompt with
those of the prompt's length and each new token with those of its step, and keeps the
cached keys as they were turned: the two disagree, and the output depends on earlier calls.

:class:`attnlab.encodings.Rotary` uses one rule instead: the token at position ``p`` is
turned with the frequencies of length ``p + 1``, the length reached when it is appended (in
a call at ``k_offset .. k_offset + S - 1``, the last key's length is ``k_offset + S``).
Every key is turned once, with the frequencies of its own position, so cached decoding in
steps or chunks gives exactly the full pass's numbers, and no call depends on another. It
equals transformers' cached generation (by a fresh module) past a prompt of at most ``M``
tokens (``O`` for longrope), whose steps are exactly per position. It differs from
transformers' one full pass over ``L > M`` tokens on the earlier tokens;
:func:`rope_frequencies` with ``seq_len=L`` gives that pass's frequencies. The price, past the original length: a score
depends on the two positions, not only on their offset, as it does under transformers'
cached generation.

Shape notation: ``P`` any positions, ``d`` rotary dim.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from attnlab._validate import check_bool, check_choice, check_finite_float, check_int

__all__ = ["ROPE_TYPES", "rope_frequencies"]

ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "longrope", "llama3", "proportional")

#: The types whose frequencies depend on the sequence length (transformers' dynamic_rope_update).
LENGTH_DEPENDENT = ("dynamic", "longrope")

# Every type takes these; then, per type, (required, optional) keys as transformers'
# _validate_<type>_rope_parameters, except that original_max_position_embeddings is optional
# (transformers' standardize_rope_params fills it from max_position_embeddings).
_COMMON_KEYS = ("rope_type", "type", "rope_theta", "partial_rotary_factor")
_KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "default": ((), ()),
    "linear": (("factor",), ()),
    "dynamic": (("factor",), ()),
    "yarn": (("factor",), ("original_max_position_embeddings", "attention_factor", "beta_fast", "beta_slow",
                          "mscale", "mscale_all_dim", "truncate")),
    "longrope": (("short_factor", "long_factor"), ("factor", "original_max_position_embeddings", "attention_factor")),
    "llama3": (("factor", "low_freq_factor", "high_freq_factor"), ("original_max_position_embeddings",)),
    "proportional": ((), ("factor",)),
}


def _key(key: str) -> str:
    """How a key is named in messages: ``rope_parameters['factor']``."""
    return f"rope_parameters[{key!r}]"


class _RopeScaling:
    """A checked ``rope_parameters`` dict: its frequencies at any length and its attention factor.

    Every key is checked once, here; :func:`rope_frequencies` and :class:`Rotary` share it.
    ``rotary_dim`` (from :class:`Rotary`) replaces ``int(head_dim * partial_rotary_factor)``
    when the dict has no ``partial_rotary_factor``, and must agree with it when it has.
    """

    def __init__(self, rope_parameters: Any, *, head_dim: int, base: float, max_position_embeddings: int | None,
                 partial_rotary_factor: float, rotary_dim: int | None = None) -> None:
        if not isinstance(rope_parameters, dict):
            raise TypeError(f"rope_parameters must be a dict like transformers' config.rope_parameters, "
                            f"got {type(rope_parameters).__name__}")
        p = self._p = rope_parameters
        if "type" in p and "rope_type" in p and p["type"] != p["rope_type"]:
            raise ValueError(f"{_key('type')}={p['type']!r} (the old name of rope_type) contradicts "
                             f"{_key('rope_type')}={p['rope_type']!r}")
        t = self.rope_type = check_choice(_key("rope_type"), p.get("rope_type", p.get("type", "default")), ROPE_TYPES)
        required, optional = _KEYS[t]
        unknown = sorted(set(p) - set(_COMMON_KEYS) - set(required) - set(optional), key=str)
        if unknown:
            known = ", ".join(map(repr, _COMMON_KEYS[:1] + _COMMON_KEYS[2:] + required + optional))
            raise ValueError(f"rope_parameters has unknown keys {unknown} for rope_type {t!r}; it takes {known}")
        missing = [k for k in required if k not in p]
        if missing:
            raise ValueError(f"rope_parameters for rope_type {t!r} lacks {missing[0]!r} "
                             f"(required: {', '.join(map(repr, required))})")
        self.head_dim = check_int("head_dim", head_dim, minimum=1)
        self.base = self._agreed("rope_theta", "base", base, 10000.0)
        if self.base <= 1.0:
            # b ** (-2i / d) is then 1 for every pair (b = 1: one speed, positions alias every 2 pi) or rises with
            # i (b < 1): no pair turns slowly enough to tell far positions apart.
            name = _key("rope_theta") if "rope_theta" in p else "base"
            raise ValueError(f"{name} must exceed 1 (the speeds b ** (-2i / d) fall with i only then), "
                             f"got {self.base:g}")
        factor = self._agreed("partial_rotary_factor", "partial_rotary_factor", partial_rotary_factor, 1.0)
        if factor > 1.0:
            name = _key("partial_rotary_factor") if "partial_rotary_factor" in p else "partial_rotary_factor"
            raise ValueError(f"{name} must be in (0, 1], got {factor:g}")
        self.max_position_embeddings = (None if max_position_embeddings is None else
                                        check_int("max_position_embeddings", max_position_embeddings, minimum=1))
        self.dim = self._rotated(factor, rotary_dim)
        self.partial_rotary_factor = factor
        self.attention_factor = 1.0
        self.inv_freq = getattr(self, f"_{t}")()  # float64 [d/2]; for longrope the short ones
        self.long_inv_freq: Tensor | None = None
        if t == "longrope":
            self.long_inv_freq = self._longrope(long=True)

    # -- checking -------------------------------------------------------------------

    def _agreed(self, key: str, name: str, value: Any, default: float) -> float:
        """``rope_parameters[key]`` if present (``value`` must then be ``default`` or equal), else ``value``."""
        value = check_finite_float(name, value, positive=True)
        if key not in self._p:
            return value
        given = check_finite_float(_key(key), self._p[key], positive=True)
        if value not in (default, given):
            raise ValueError(f"{_key(key)}={given:g} contradicts {name}={value:g}: give one of them, or equal values")
        return given

    def _rotated(self, factor: float, rotary_dim: int | None) -> int:
        """The number ``d`` of features the frequencies cover, checked even and at least 2."""
        if self.rope_type == "proportional":  # speeds for the whole head, some of them 0
            if rotary_dim not in (None, self.head_dim):
                raise ValueError(f"rope_type 'proportional' turns the whole head (head_dim={self.head_dim}), "
                                 f"got rotary_dim={rotary_dim}; set rope_parameters['partial_rotary_factor']")
            d = self.head_dim
        else:
            d = int(self.head_dim * factor)
            if rotary_dim is not None and "partial_rotary_factor" not in self._p:
                d = rotary_dim
            elif rotary_dim is not None and d != rotary_dim:
                raise ValueError(f"{_key('partial_rotary_factor')}={factor:g} rotates {d} of head_dim="
                                 f"{self.head_dim} features, which contradicts rotary_dim={rotary_dim}")
        if d < 2 or d % 2:
            raise ValueError(f"head_dim={self.head_dim} with partial_rotary_factor={factor:g} rotates {d} features; "
                             "features turn in pairs, so that must be even and at least 2")
        return d

    def _number(self, key: str, default: float | None = None, *, positive: bool = True) -> float | None:
        """``rope_parameters[key]`` as a float; ``default`` when it is absent or None."""
        value = self._p.get(key)
        return default if value is None else check_finite_float(_key(key), value, positive=positive)

    def _required(self, key: str) -> float:
        """``rope_parameters[key]``, a required positive number (None refused)."""
        return check_finite_float(_key(key), self._p[key], positive=True)

    def _mpe(self, why: str) -> int:
        """``max_position_embeddings``, which this type needs (``why`` says for what)."""
        if self.max_position_embeddings is None:
            raise ValueError(f"rope_type {self.rope_type!r} needs max_position_embeddings ({why}), got None")
        return self.max_position_embeddings

    def _original(self) -> int:
        """``O``: original_max_position_embeddings, or max_position_embeddings as transformers fills it in."""
        key = "original_max_position_embeddings"
        if key in self._p:
            return check_int(_key(key), self._p[key], minimum=1)
        return self._mpe(f"for the original length, as {_key(key)} is not given")

    def _factor(self, original: int) -> float:
        """yarn's and longrope's ``factor``; None or absent means ``max_position_embeddings / O``."""
        given = self._number("factor")
        if given is not None:
            return given
        return self._mpe("for factor = max_position_embeddings / original length, as factor is None") / original

    def _factors(self, key: str) -> Tensor:
        """longrope's per-pair ``short_factor`` / ``long_factor``, float64 ``[d/2]``."""
        value = self._p[key]
        if not isinstance(value, (list, tuple)) or len(value) != self.dim // 2:
            raise ValueError(f"{_key(key)} must be a list of {self.dim // 2} positive numbers (one per pair of "
                             f"the {self.dim} rotated features), got {value!r:.80}")
        return torch.tensor([check_finite_float(_key(key), v, positive=True) for v in value], dtype=torch.float64)

    # -- the formulas (each from its transformers function, named in the module docstring) -------

    def _powers(self, n: int, denominator: int) -> Tensor:
        """``b ** (-2i / denominator)`` for ``i < n`` (RoFormer eq. 15), float64 ``[n]``."""
        exponents = torch.arange(0, 2 * n, 2, dtype=torch.float64) / denominator  # [n]: 2i / denominator
        return torch.exp(-exponents * math.log(self.base))

    def _default(self) -> Tensor:
        return self._powers(self.dim // 2, self.dim)

    def _linear(self) -> Tensor:
        return self._default() / self._required("factor")

    def _dynamic(self) -> Tensor:
        if self.dim < 4:
            raise ValueError(f"rope_type 'dynamic' needs at least 4 rotated features (its exponent d / (d - 2) "
                             f"divides by zero), got {self.dim}")
        self._dynamic_factor = self._required("factor")
        return self._dynamic_at(torch.tensor(float(self._mpe("the length it was trained on")), dtype=torch.float64))

    def _dynamic_at(self, lengths: Tensor) -> Tensor:
        """Dynamic NTK's speeds for each of the float64 ``lengths [*P]``: ``[*P, d/2]``."""
        m, factor, d = self.max_position_embeddings, self._dynamic_factor, self.dim
        assert m is not None
        scale = factor * lengths.clamp(min=m) / m - (factor - 1)  # [*P], 1 up to max_position_embeddings
        log_base = math.log(self.base) + (d / (d - 2)) * torch.log(scale)  # [*P]: ln(b * scale ** (d / (d - 2)))
        exponents = torch.arange(0, d, 2, dtype=torch.float64) / d  # [d/2]
        return torch.exp(-exponents * log_base[..., None])  # [*P, 1] * [d/2] -> [*P, d/2]

    def _yarn(self) -> Tensor:
        d, original = self.dim, self._original()
        factor = self._factor(original)
        given = self._number("attention_factor")
        mscale, mscale_all_dim = self._number("mscale", positive=False), self._number("mscale_all_dim", positive=False)

        def m(scale: float, k: float = 1.0) -> float:  # YaRN's sqrt(1/t) = 0.1 ln(s) + 1, paper eq. 22
            return 1.0 if scale <= 1 else 0.1 * k * math.log(scale) + 1.0

        if given is not None:
            self.attention_factor = given
        elif mscale and mscale_all_dim:  # truthiness, as transformers: 0 is "not set"
            self.attention_factor = m(factor, mscale) / m(factor, mscale_all_dim)
        else:
            self.attention_factor = m(factor)
        # `or`, as transformers: 0 (and None) mean the paper's 32 and 1.
        beta_fast = self._number("beta_fast", positive=False) or 32.0
        beta_slow = self._number("beta_slow", positive=False) or 1.0
        if beta_fast < 0 or beta_slow < 0:
            raise ValueError(f"{_key('beta_fast')} and {_key('beta_slow')} must be positive, "
                             f"got {beta_fast:g} and {beta_slow:g}")
        if beta_fast <= beta_slow:
            # The ramp runs from the pair turning beta_fast times to the one turning beta_slow times: reversed,
            # it interpolates the fast pairs and keeps the slow ones, the opposite of YaRN.
            raise ValueError(f"{_key('beta_fast')} must exceed {_key('beta_slow')} (rotations over the original "
                             f"length, fast pairs kept, slow ones interpolated), got {beta_fast:g} and {beta_slow:g}")

        def pair(rotations: float) -> float:  # the pair that turns `rotations` times over the original length
            return d * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(self.base))

        low, high = pair(beta_fast), pair(beta_slow)
        if check_bool(_key("truncate"), self._p.get("truncate", True)):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, d - 1)
        if low == high:
            high += 0.001  # transformers' guard against 0 / 0
        ramp = ((torch.arange(d // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)  # [d/2]
        theta = self._default()
        return theta / factor * ramp + theta * (1 - ramp)  # [d/2]: 1 interpolates, 0 keeps

    def _longrope(self, long: bool = False) -> Tensor:
        original = self._long_above = self._original()  # long_factor for lengths above it
        factor = self._factor(original)
        given = self._number("attention_factor")
        if given is not None:
            self.attention_factor = given
        elif factor > 1.0:
            if original == 1:
                raise ValueError(f"{_key('original_max_position_embeddings')}=1 gives no attention factor "
                                 "(it divides by ln 1); give rope_parameters['attention_factor']")
            self.attention_factor = math.sqrt(1 + math.log(factor) / math.log(original))
        return self._default() / self._factors("long_factor" if long else "short_factor")

    def _llama3(self) -> Tensor:
        factor, low, high = (self._required(k) for k in ("factor", "low_freq_factor", "high_freq_factor"))
        if high <= low:
            raise ValueError(f"{_key('high_freq_factor')} must exceed {_key('low_freq_factor')}, "
                             f"got {high:g} and {low:g}")
        original = self._original()
        theta = self._default()
        wavelength = 2 * math.pi / theta  # [d/2]
        scaled = torch.where(wavelength > original / low, theta / factor, theta)
        smooth = (original / wavelength - low) / (high - low)  # [d/2]: 0 at O / low, 1 at O / high
        medium = (wavelength >= original / high) & (wavelength <= original / low)
        return torch.where(medium, (1 - smooth) * scaled / factor + smooth * scaled, scaled)

    def _proportional(self) -> Tensor:
        n = int(self.partial_rotary_factor * self.head_dim // 2)  # transformers' rounding, kept
        theta = torch.zeros(self.head_dim // 2, dtype=torch.float64)
        theta[:n] = self._powers(n, self.head_dim)
        return theta / self._number("factor", 1.0)  # type: ignore[operator]

    # -- at a length ------------------------------------------------------------------

    def at_length(self, seq_len: int | None) -> Tensor:
        """The speeds float64 ``[d/2]`` for a sequence of ``seq_len`` tokens (None: the original length)."""
        if seq_len is None or self.rope_type not in LENGTH_DEPENDENT:
            return self.inv_freq
        if self.rope_type == "dynamic":
            return self._dynamic_at(torch.tensor(float(seq_len), dtype=torch.float64))
        assert self.long_inv_freq is not None
        return self.long_inv_freq if seq_len > self._long_above else self.inv_freq

    def at_positions(self, positions: Tensor) -> Tensor:
        """The speeds of each position ``[*P]`` under the per-position rule: float64 ``[*P, d/2]`` on the CPU.

        Position ``p`` gets the frequencies of length ``p + 1`` (see the module docstring).
        """
        lengths = positions.detach().to("cpu", torch.float64) + 1  # [*P]: the length reached at each position
        if self.rope_type == "dynamic":
            return self._dynamic_at(lengths)
        assert self.long_inv_freq is not None
        long = (lengths > self._long_above)[..., None]  # [*P, 1]
        return torch.where(long, self.long_inv_freq, self.inv_freq)  # [*P, d/2]


def rope_frequencies(
    rope_parameters: dict[str, Any],
    *,
    head_dim: int,
    base: float = 10000.0,
    max_position_embeddings: int | None = None,
    partial_rotary_factor: float = 1.0,
    seq_len: int | None = None,
) -> tuple[Tensor, float]:
    """The rotary speeds and the attention factor of a transformers ``rope_parameters`` dict.

    Equal, in float64, to ``ROPE_INIT_FUNCTIONS[rope_type](config, seq_len=seq_len)`` of
    transformers 5.23 for a config with these values (``"default"``: the models'
    ``compute_default_rope_parameters``); the formulas, sources and quirks are in the
    module docstring. The attention factor multiplies cos and sin (so a score
    ``q . k`` by its square).

    Args:
        rope_parameters: ``{"rope_type": ..., "factor": ..., ...}`` with transformers'
            keys for the type (:data:`ROPE_TYPES`); may hold ``rope_theta`` and
            ``partial_rotary_factor``.
        head_dim: features per head ``Dh``.
        base: ``rope_theta`` when the dict has none (a dict's value wins over 10000.0;
            any other value must agree with it).
        max_position_embeddings: the model's ``max_position_embeddings`` ``M``: needed by
            "dynamic", and by "yarn", "longrope" and "llama3" when
            ``original_max_position_embeddings`` is absent (or yarn's or longrope's
            ``factor`` is None).
        partial_rotary_factor: the fraction of ``Dh`` rotated, ``d = int(Dh * f)``; the
            dict's value wins over 1.0, any other value must agree with it.
        seq_len: the sequence length, for "dynamic" (None: ``M``) and "longrope"
            (``long_factor`` above ``original_max_position_embeddings``, None: short);
            ignored by the other types.

    Returns:
        ``(inv_freq, attention_factor)``: float64 ``[d/2]`` (``[Dh/2]`` for
        "proportional") and a float.

    Raises:
        TypeError: for a ``rope_parameters`` that is not a dict, or a value of the wrong type.
        ValueError: naming the key and its value, for an unknown ``rope_type`` (listing
            the known), an unknown or missing key, a ``rope_theta`` or
            ``partial_rotary_factor`` that contradicts the argument, an odd number of
            rotated features, a missing ``max_position_embeddings`` where the type needs
            it, and bad numbers.

    Example:
        >>> inv_freq, attention_factor = rope_frequencies({"rope_type": "linear", "factor": 4.0}, head_dim=8)
        >>> inv_freq
        tensor([2.5000e-01, 2.5000e-02, 2.5000e-03, 2.5000e-04], dtype=torch.float64)
        >>> rope_frequencies({"rope_type": "yarn", "factor": 4.0}, head_dim=8, max_position_embeddings=64)[1]
        1.138629436111989
    """
    scaling = _RopeScaling(rope_parameters, head_dim=head_dim, base=base, partial_rotary_factor=partial_rotary_factor,
                           max_position_embeddings=max_position_embeddings)
    if seq_len is not None:
        # Past 2**53 float64 no longer holds every position: the speeds would be for another length than this one.
        seq_len = check_int("seq_len", seq_len, minimum=1, maximum=2**53)
    return scaling.at_length(seq_len), scaling.attention_factor
