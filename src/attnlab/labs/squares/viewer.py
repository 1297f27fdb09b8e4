"""An interactive view of every attention map, as one self-contained HTML fragment.

:func:`render_viewer` turns :class:`ViewerData` (the weights of every attention
layer on a few sequences, with labels) into HTML the report embeds
(:class:`attnlab.labs.report.Html`): choose a sequence, a layer and a head from
menus; hover (or focus) a cell to read its weight and its query and key. Pure:
data in, a string out; it runs no model (the squares lab computes the data with
:func:`attnlab.labs.squares.figures.attention_viewer_data`). Its words are the
squares lab's: the sequences are called squares.

The page stays self-contained and safe: the weights are inlined as JSON in a
``<script type="application/json">`` block (``<``, ``>`` and ``&`` escaped, so no
label can close the script), the script and the style are inline, nothing is
fetched, and the data reaches the page through ``textContent`` only. Without
JavaScript the fragment still shows the first sequence's first map as a table
(the menus stay hidden), and every cell carries its weight in a tooltip.

The URL fragment selects what the page opens on, in the numbers the page shows
(from 1): ``report.html#viewer=square:2,layer:decoder.cross,head:1,cell:2,1``
opens square 2, the cross-attention layer (a layer's key, its module name or its
number in the menu), head 1, with the cell of query 2 and key 1 shown as hovered.
The page keeps the fragment up to date as the reader chooses, so a view can be
shared as a link. Values out of range are ignored, and the page says which.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

__all__ = ["ViewerData", "ViewerLayer", "render_viewer", "viewer_json"]

_DECIMALS = 6  # the weights as the page holds them: far below what a reader (or a test at 4 decimals) sees


@dataclass(frozen=True)
class ViewerLayer:
    """One attention layer's weights on every sequence shown.

    Attributes:
        key: the layer's short name in the URL fragment (e.g. ``"decoder.cross"``).
        name: the module's name in the model (e.g. ``"decoder.layer.cross_attn_heads"``).
        title: a readable title (e.g. ``"Cross-Attention"``).
        queries: one label per query position ``T`` (the rows).
        keys: one label per key position ``S`` (the columns).
        weights: ``[N, H, T, S]``, one map per sequence and head.
    """

    key: str
    name: str
    title: str
    queries: Sequence[str]
    keys: Sequence[str]
    weights: Tensor


@dataclass(frozen=True)
class ViewerData:
    """What the viewer shows: ``N`` sequences (by label) and every attention layer's weights on them."""

    sequences: Sequence[str]
    layers: Sequence[ViewerLayer]


def viewer_json(data: ViewerData) -> dict[str, Any]:
    """``data`` as the JSON-ready dict the page embeds (weights rounded to 6 decimals).

    Returns:
        ``{"sequences": [...], "layers": [{"key", "name", "title", "queries", "keys",
        "weights": [N][H][T][S]}]}``.

    Raises:
        ValueError: naming the layer, for no sequences or no layers, weights that are
            not ``[N, H, T, S]`` with ``N`` sequences and as many query and key labels
            as positions, non-finite weights, and two layers with one key.
    """
    n = len(data.sequences)
    if n == 0 or not data.layers:
        raise ValueError(f"data must hold at least one sequence and one layer, got {n} and {len(data.layers)}")
    layers, seen = [], set()
    for layer in data.layers:
        weights = layer.weights
        if not isinstance(weights, Tensor) or weights.dim() != 4:
            raise ValueError(f"layer {layer.name!r}: weights must be a tensor [N, H, T, S], got "
                             f"{list(weights.shape) if isinstance(weights, Tensor) else type(weights).__name__}")
        shape = (n, weights.shape[1], len(layer.queries), len(layer.keys))
        if tuple(weights.shape) != shape:
            raise ValueError(f"layer {layer.name!r}: weights are {list(weights.shape)}, but {n} sequences, "
                             f"{len(layer.queries)} query and {len(layer.keys)} key labels need [N, H, T, S] = "
                             f"{list(shape)}")
        if not bool(torch.isfinite(weights).all()):
            raise ValueError(f"layer {layer.name!r}: weights must be finite")
        if layer.key in seen:
            raise ValueError(f"layer key {layer.key!r} is used twice: the URL fragment could not tell them apart")
        seen.add(layer.key)
        layers.append({"key": layer.key, "name": layer.name, "title": layer.title,
                       "queries": [str(q) for q in layer.queries], "keys": [str(k) for k in layer.keys],
                       "weights": weights.detach().double().cpu().round(decimals=_DECIMALS).tolist()})
    return {"sequences": [str(s) for s in data.sequences], "layers": layers}


def _script_json(value: Any) -> str:
    """JSON that is safe inside ``<script>``: no ``<``, ``>`` or ``&`` (so no ``</script>``, no ``<!--``)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _colors(weight: float) -> tuple[str, str]:
    """A cell's background (white at 0 to dark blue at 1) and a text color readable on it; as the script's."""
    w = min(max(weight, 0.0), 1.0)
    r, g, b = (round(255 + (c - 255) * w) for c in (0x1F, 0x3B, 0x73))
    return f"rgb({r}, {g}, {b})", ("#fff" if w > 0.5 else "#111")


def _caption(number: int, sequence: str, layer: dict[str, Any], head: int) -> str:
    """What the map shows, in words (numbers from 1); as the script's."""
    return f"Square {number} ({sequence}) · {layer['title']} ({layer['name']}) · head {head}"


def _static_grid(layer: dict[str, Any]) -> str:
    """The first sequence's first head of ``layer`` as a table: what the page shows before (or without) its script."""
    esc = html.escape
    weights = layer["weights"][0][0]  # [T, S]
    head = "".join(f'<th scope="col" data-col="{s}">{esc(k)}</th>' for s, k in enumerate(layer["keys"]))
    rows = []
    for t, query in enumerate(layer["queries"]):
        cells = []
        for s, key in enumerate(layer["keys"]):
            w = weights[t][s]
            background, color = _colors(w)
            tip = esc(f"query {query} → key {key}: {w:.4f}")
            cells.append(f'<td data-row="{t}" data-col="{s}" data-weight="{w}" title="{tip}" '
                         f'style="background:{background};color:{color}">{w:.2f}</td>')
        rows.append(f'<tr><th scope="row" data-row="{t}">{esc(query)}</th>{"".join(cells)}</tr>')
    return (f'<table id="attn-grid" class="attn-grid">'
            f'<thead><tr><th class="attn-corner">query \\ key</th>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>')


def render_viewer(data: ViewerData, *, title: str = "Attention maps, interactive") -> str:
    """The viewer as an HTML fragment (a ``<section id="attn-viewer">``), self-contained.

    Args:
        data: the sequences and the layers to show.
        title: the section's heading.

    Returns:
        HTML: the heading, a short guide, the menus, the map of the first sequence,
        layer and head as a table (replaced by the script's as the reader chooses),
        the data as JSON, and the inline script and style. It references no URL.

    Raises:
        ValueError: what :func:`viewer_json` raises for inconsistent data.
    """
    payload = viewer_json(data)
    first = payload["layers"][0]
    n, n_layers = len(payload["sequences"]), len(payload["layers"])
    guide = (f"Every attention map of the model on the first {n} test squares: choose a square, a layer ({n_layers} "
             "here) and a head; hover over a cell (or focus it with Tab) to read its weight. Rows are queries (the "
             "position that attends), columns keys (the positions it attends to); each row sums to 1.")
    return (f'<section id="attn-viewer" class="attn-viewer">\n<style>{_STYLE}</style>\n'
            f"<h2>{html.escape(title)}</h2>\n<p>{html.escape(guide)}</p>\n"
            "<noscript><p>The menus need JavaScript: below is the first square's map of the first layer and head "
            "(hover over a cell for its weight); the figures show the others for the first two squares.</p>"
            "</noscript>\n"
            '<div class="attn-controls" hidden>'
            '<label>Square <select id="attn-square"></select></label> '
            '<label>Layer <select id="attn-layer"></select></label> '
            '<label>Head <select id="attn-head"></select></label></div>\n'
            f'<p id="attn-caption" class="attn-caption">{html.escape(_caption(1, payload["sequences"][0], first, 1))}'
            '<span class="attn-legend" aria-hidden="true">0 <span class="attn-bar"></span> 1</span></p>\n'
            f'<div class="attn-main">{_static_grid(first)}'
            '<p id="attn-readout" class="attn-readout" aria-live="polite">Hover over a cell to read its weight.</p>'
            '<p id="attn-note" class="attn-note" hidden></p></div>\n'
            f'<script type="application/json" id="attn-viewer-data">{_script_json(payload)}</script>\n'
            f"<script>{_SCRIPT}</script>\n</section>")


_STYLE = """
.attn-viewer { margin: 2em 0; }
.attn-controls { margin: .5em 0 1em; display: flex; flex-wrap: wrap; gap: .5em 1.5em; }
.attn-controls select { font: inherit; padding: .15em .3em; max-width: 28em; }
.attn-caption { color: #444; margin: .5em 0; }
.attn-legend { margin-left: 2em; font-size: .85em; color: #666; white-space: nowrap; }
.attn-bar { display: inline-block; width: 8em; height: .8em; vertical-align: middle; border: 1px solid #ccc;
  background: linear-gradient(to right, rgb(255, 255, 255), rgb(31, 59, 115)); }
.attn-grid { border-collapse: separate; border-spacing: 3px; }
.attn-grid td { width: 5.5em; height: 3.2em; text-align: center; border: 2px solid #e4e4e4;
  font-variant-numeric: tabular-nums; cursor: default; border-radius: 3px; }
.attn-grid th { font-weight: normal; color: #444; padding: 0 .6em; border: 0; }
.attn-grid td.attn-hover, .attn-grid td:focus { border-color: #e8590c; outline: none; }
.attn-grid th.attn-hover { color: #e8590c; font-weight: bold; }
.attn-corner { font-size: .8em; color: #888 !important; }
.attn-readout { min-height: 1.5em; font-size: 1.1em; } .attn-note { color: #a61e4d; }
"""

# The page's script: no library, no network; data in through JSON.parse and out through textContent.
_SCRIPT = r"""
(function () {
  "use strict";
  var root = document.getElementById("attn-viewer");
  var data = JSON.parse(document.getElementById("attn-viewer-data").textContent);
  var menus = {square: root.querySelector("#attn-square"), layer: root.querySelector("#attn-layer"),
               head: root.querySelector("#attn-head")};
  var readout = root.querySelector("#attn-readout"), note = root.querySelector("#attn-note");
  var state = {square: 0, layer: 0, head: 0, cell: null};

  function option(select, value, text) {
    var o = document.createElement("option");
    o.value = String(value); o.textContent = text; select.appendChild(o);
  }
  function choose(select, value) {
    // The option's selected attribute too, so that a saved or serialised page shows the choice.
    Array.prototype.forEach.call(select.options, function (o) { o.defaultSelected = o.value === String(value); });
    select.value = String(value);
  }
  function layer() { return data.layers[state.layer]; }
  function weight(t, s) { return layer().weights[state.square][state.head][t][s]; }
  function colors(w) {
    w = Math.min(Math.max(w, 0), 1);
    var rgb = [0x1f, 0x3b, 0x73].map(function (c) { return Math.round(255 + (c - 255) * w); });
    return ["rgb(" + rgb.join(", ") + ")", w > 0.5 ? "#fff" : "#111"];
  }
  function describe(t, s) {
    return "Square " + (state.square + 1) + ", " + layer().title + ", head " + (state.head + 1) + ": query " +
      layer().queries[t] + " \u2192 key " + layer().keys[s] + ": weight " + weight(t, s).toFixed(4);
  }
  function fillHeads() {
    menus.head.textContent = "";
    for (var h = 0; h < layer().weights[0].length; h++) { option(menus.head, h, "head " + (h + 1)); }
    choose(menus.head, state.head);
  }
  function cell(tag, text, attrs) {
    var el = document.createElement(tag);
    el.textContent = text;
    Object.keys(attrs).forEach(function (k) { el.setAttribute(k, attrs[k]); });
    return el;
  }
  function draw() {
    var L = layer(), table = document.createElement("table");
    table.id = "attn-grid"; table.className = "attn-grid";
    root.querySelector("#attn-caption").firstChild.textContent = "Square " + (state.square + 1) + " (" +
      data.sequences[state.square] + ") \u00b7 " + L.title + " (" + L.name + ") \u00b7 head " + (state.head + 1);
    var head = document.createElement("tr");
    head.appendChild(cell("th", "query \\ key", {"class": "attn-corner"}));
    L.keys.forEach(function (k, s) { head.appendChild(cell("th", k, {scope: "col", "data-col": s})); });
    table.appendChild(document.createElement("thead")).appendChild(head);
    var body = table.appendChild(document.createElement("tbody"));
    L.queries.forEach(function (q, t) {
      var row = body.appendChild(document.createElement("tr"));
      row.appendChild(cell("th", q, {scope: "row", "data-row": t}));
      L.keys.forEach(function (k, s) {
        var w = weight(t, s), c = colors(w);
        row.appendChild(cell("td", w.toFixed(2), {"data-row": t, "data-col": s, "data-weight": String(w),
          tabindex: "0", title: "query " + q + " \u2192 key " + k + ": " + w.toFixed(4),
          style: "background:" + c[0] + ";color:" + c[1]}));
      });
    });
    root.querySelector("#attn-grid").replaceWith(table);
    if (state.cell) {
      hover(state.cell[0], state.cell[1]);
    } else {
      readout.textContent = "Hover over a cell to read its weight.";
    }
  }
  function hover(t, s) {
    root.querySelectorAll(".attn-hover").forEach(function (el) { el.classList.remove("attn-hover"); });
    root.querySelectorAll('#attn-grid [data-row="' + t + '"]:not(td), #attn-grid th[data-col="' + s + '"], ' +
      '#attn-grid td[data-row="' + t + '"][data-col="' + s + '"]').forEach(function (el) {
      el.classList.add("attn-hover");
    });
    state.cell = [t, s];
    readout.textContent = describe(t, s);
  }
  function fragment() {
    var parts = ["square:" + (state.square + 1), "layer:" + layer().key, "head:" + (state.head + 1)];
    if (state.cell) { parts.push("cell:" + (state.cell[0] + 1) + "," + (state.cell[1] + 1)); }
    try { history.replaceState(null, "", "#viewer=" + parts.join(",")); } catch (e) { /* a sandboxed page */ }
  }
  function index(text, count) {
    var i = Number(text);
    return Number.isInteger(i) && i >= 1 && i <= count ? i - 1 : -1;
  }
  function fromFragment() {
    var m = /(?:^#|&)viewer=([^&]*)/.exec(location.hash);
    if (!m) { return false; }
    var spec = decodeURIComponent(m[1]), ignored = [], re = /(\w+):([^:]*?)(?=,\w+:|$)/g, p, want = {};
    while ((p = re.exec(spec)) !== null) { want[p[1]] = p[2]; }
    if ("square" in want) {
      var q = index(want.square, data.sequences.length);
      if (q < 0) { ignored.push("square:" + want.square); } else { state.square = q; }
    }
    if ("layer" in want) {
      var l = data.layers.findIndex(function (L) { return L.key === want.layer || L.name === want.layer; });
      if (l < 0) { l = index(want.layer, data.layers.length); }
      if (l < 0) { ignored.push("layer:" + want.layer); } else { state.layer = l; }
    }
    if ("head" in want) {
      var h = index(want.head, layer().weights[0].length);
      if (h < 0) { ignored.push("head:" + want.head); } else { state.head = h; }
    }
    if ("cell" in want) {
      var ts = want.cell.split(","), t = index(ts[0], layer().queries.length), s = index(ts[1], layer().keys.length);
      if (ts.length !== 2 || t < 0 || s < 0) { ignored.push("cell:" + want.cell); } else { state.cell = [t, s]; }
    }
    Object.keys(want).forEach(function (k) {
      if (["square", "layer", "head", "cell"].indexOf(k) < 0) { ignored.push(k + ":" + want[k]); }
    });
    if (ignored.length) { note.textContent = "Ignored in the link: " + ignored.join(", "); note.hidden = false; }
    return true;
  }

  data.sequences.forEach(function (s, i) { option(menus.square, i, (i + 1) + ". " + s); });
  data.layers.forEach(function (L, i) { option(menus.layer, i, L.title); });
  var linked = fromFragment();
  choose(menus.square, state.square); choose(menus.layer, state.layer); fillHeads();
  menus.square.addEventListener("change", function () {
    state.square = Number(menus.square.value); choose(menus.square, state.square); draw(); fragment();
  });
  menus.layer.addEventListener("change", function () {
    state.layer = Number(menus.layer.value); choose(menus.layer, state.layer); state.cell = null;
    state.head = Math.min(state.head, layer().weights[0].length - 1); fillHeads(); draw(); fragment();
  });
  menus.head.addEventListener("change", function () {
    state.head = Number(menus.head.value); choose(menus.head, state.head); draw(); fragment();
  });
  function onCell(event) {
    var td = event.target.closest ? event.target.closest("td[data-row]") : null;
    if (td && root.contains(td)) { hover(Number(td.dataset.row), Number(td.dataset.col)); }
  }
  root.addEventListener("mouseover", onCell);
  root.addEventListener("focusin", onCell);
  root.querySelector(".attn-controls").hidden = false;
  draw();
  root.setAttribute("data-ready", "true");
  // A link to a view shows the viewer; a page whose viewer is already in sight is not moved.
  if (linked && root.getBoundingClientRect().top > window.innerHeight / 2) { root.scrollIntoView(); }
})();
"""
