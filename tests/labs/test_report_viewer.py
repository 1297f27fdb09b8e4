"""The report's interactive attention viewer.

Unmarked (always run): the renderer is a pure function: its HTML references no
URL and fetches nothing, its embedded JSON parses back to the weights (even with
labels that try to close the script), bad data is refused by name; the report
takes a trusted fragment only as `Html` and still escapes every text; a run of the
plain GRU (no attention) says so and has no viewer.

`@pytest.mark.browser` (skipped without Chromium; `make test-browser` installs it):
a tiny run's report.html opened in headless Chromium with a `#viewer=...`
fragment; the DOM after the scripts ran must show the chosen square, layer and
head, with every cell's weight equal (to 4 decimals) to the weights of the
model rebuilt from the run's checkpoint, computed here on the test squares made
afresh; the menus list every square, layer and head; the hovered cell and an
ignored fragment value are shown.
"""

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser

import pytest
import torch

from attnlab.data import generate_sequences, squares_tensor
from attnlab.labs.report import Html, Report, render
from attnlab.labs.squares.figures import SquaresTestSet, attention_viewer_data, attention_weights
from attnlab.labs.squares.train import SquaresConfig, load_run, train_run
from attnlab.labs.squares.viewer import ViewerData, ViewerLayer, render_viewer, viewer_json

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = {"epochs": 2, "n_train": 32, "n_test": 8}


class Dom(HTMLParser):
    """The elements of a page as ``(tag, attrs, text)``, text being all the text inside the element."""

    def __init__(self, page):
        super().__init__(convert_charrefs=True)
        self.elements, self._open = [], []
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        element = [tag, dict(attrs), ""]
        self.elements.append(element)
        if tag not in {"meta", "br", "img", "input", "link"}:
            self._open.append(element)

    def handle_endtag(self, tag):
        while self._open:
            if self._open.pop()[0] == tag:
                break

    def handle_data(self, data):
        for element in self._open:
            element[2] += data

    def find(self, tag=None, **attrs):
        return [e for e in self.elements if (tag is None or e[0] == tag)
                and all(e[1].get(k.replace("_", "-")) == v for k, v in attrs.items())]

    def one(self, tag=None, **attrs):
        (found,) = self.find(tag, **attrs)
        return found


def layer(key="decoder.cross", name="decoder.layer.cross_attn_heads", weights=None, queries=("q1", "q2"),
          keys=("k1", "k2", "k3")):
    if weights is None:
        weights = torch.rand(2, 3, len(queries), len(keys), dtype=torch.float64).softmax(-1)
    return ViewerLayer(key=key, name=name, title="Cross-Attention", queries=queries, keys=keys, weights=weights)


# -- the renderer (no browser) ------------------------------------------------------------


def test_the_fragment_is_self_contained():
    page = render_viewer(ViewerData(sequences=["a", "b"], layers=[layer(), layer("encoder.self", "enc")]))
    assert not re.search(r"https?:", page)
    assert not re.search(r"\s(src|href)\s*=", page)
    assert "<link" not in page and "@import" not in page and "url(" not in page
    assert "fetch(" not in page and "XMLHttpRequest" not in page
    dom = Dom(page)
    scripts = dom.find("script")
    assert len(scripts) == 2 and all("src" not in s[1] for s in scripts)


def test_the_embedded_json_round_trips_even_with_labels_that_close_the_script():
    evil = "</script><script>alert(1)</script>&amp;<!--"
    weights = torch.rand(2, 3, 2, 3, dtype=torch.float64).softmax(-1)
    data = ViewerData(sequences=[evil, "b & c"], layers=[layer(weights=weights, queries=(evil, "q2"))])
    page = render_viewer(data)
    assert page.count("</script>") == 2  # the two scripts' own ends, nothing from the labels
    assert "alert(1)</script>" not in page
    dom = Dom(page)
    payload = json.loads(dom.one("script", id="attn-viewer-data")[2])
    assert payload["sequences"] == [evil, "b & c"] and payload["layers"][0]["queries"] == [evil, "q2"]
    got = torch.tensor(payload["layers"][0]["weights"], dtype=torch.float64)  # [N, H, T, S]
    torch.testing.assert_close(got, weights, rtol=0, atol=5e-7)  # 6 decimals
    assert payload == viewer_json(data)
    # The table shown before (or without) the script: the first sequence, layer and head, escaped.
    cells = dom.find("td")
    assert [float(c[1]["data-weight"]) for c in cells] == pytest.approx(weights[0, 0].flatten().tolist(), abs=5e-7)
    assert evil in dom.find("th", scope="row")[0][2]
    assert "hidden" in dom.one("div", **{"class": "attn-controls"})[1]  # no menus without the script


@pytest.mark.parametrize(("data", "message"), [
    (ViewerData(sequences=[], layers=[layer()]), "at least one sequence and one layer"),
    (ViewerData(sequences=["a", "b"], layers=[]), "at least one sequence and one layer"),
    (ViewerData(sequences=["a"], layers=[layer()]), r"weights are \[2, 3, 2, 3\], but 1 sequences"),
    (ViewerData(sequences=["a", "b"], layers=[layer(weights=torch.rand(2, 3, 2, 3), queries=("q",))]),
     r"1 query and 3 key labels"),
    (ViewerData(sequences=["a", "b"], layers=[layer(weights=torch.full((2, 1, 2, 3), float("nan")))]),
     "must be finite"),
    (ViewerData(sequences=["a", "b"], layers=[layer(weights=torch.rand(2, 2, 3))]), r"tensor \[N, H, T, S\]"),
    (ViewerData(sequences=["a", "b"], layers=[layer(), layer(name="other")]), "'decoder.cross' is used twice"),
])
def test_inconsistent_data_is_refused_by_name(data, message):
    with pytest.raises(ValueError, match=message):
        render_viewer(data)


def test_the_report_takes_markup_only_as_html_and_escapes_the_rest():
    page = render(Report(title="<b>t</b>", paragraphs=["<i>x</i>"], sections=[Html('<div id="mine">ok</div>')]))
    assert '<div id="mine">ok</div>' in page
    assert "<b>t</b>" not in page and "&lt;i&gt;x&lt;/i&gt;" in page
    with pytest.raises(TypeError, match="Report.sections takes Html fragments, got str"):
        render(Report(title="t", sections=['<div id="mine">ok</div>']))
    with pytest.raises(TypeError, match="markup must be a str"):
        Html(b"<p>")


def test_the_squares_data_labels_every_layer_of_the_self_attention_model():
    torch.manual_seed(43)
    from attnlab.labs.squares.models import squares_model

    model = squares_model("selfattn-pe")
    points, directions = generate_sequences(n=10, seed=19)
    full = squares_tensor(points)
    squares = SquaresTestSet(full[:, :2], full[:, 2:], torch.from_numpy(directions))
    data = attention_viewer_data(model, squares, n=3)
    assert len(data.sequences) == 3 and data.sequences[0].startswith("clockwise" if directions[0] else "counter")
    assert [(v.key, v.title) for v in data.layers] == [
        ("encoder.self", "Encoder Self-Attention"), ("decoder.self", "Decoder Self-Attention"),
        ("decoder.cross", "Cross-Attention")]
    enc, dec, cross = data.layers
    assert (list(enc.queries), list(enc.keys)) == (["Point #1", "Point #2"], ["Point #1", "Point #2"])
    assert (list(dec.queries), list(dec.keys)) == (["Point #3", "Point #4"], ["Point #2", "Point #3"])
    assert (list(cross.queries), list(cross.keys)) == (["Point #3", "Point #4"], ["Point #1", "Point #2"])
    torch.testing.assert_close(cross.weights, attention_weights(model, full[:3, :2])["decoder.layer.cross_attn_heads"])


@pytest.mark.training
def test_a_model_without_attention_gets_no_viewer_and_the_report_says_so(tmp_path):
    train_run(SquaresConfig(model="gru", **TINY), tmp_path / "gru", progress=False)
    page = (tmp_path / "gru" / "report.html").read_text()
    assert "attn-viewer" not in page
    assert "has no attention layer" in page


# -- the page in a browser -----------------------------------------------------------------

CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome",
                                                 "google-chrome-stable"))), None)
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium found (`make test-browser` installs it)")


def dump_dom(path, fragment, tmp_path):
    """The page's DOM after its scripts ran, from headless Chromium (no network, a throwaway profile)."""
    profile = tmp_path / "chromium-profile"
    result = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", "--dump-dom", f"{path.as_uri()}#{fragment}"],
        capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    return Dom(result.stdout)


@pytest.fixture(scope="module")
def pe_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("runs") / "pe"
    train_run(SquaresConfig(model="selfattn-pe", **TINY), folder, progress=False)
    # The weights the page must show, from the saved checkpoint, on test squares made here.
    _, model, _ = load_run(folder)
    points, _ = generate_sequences(n=TINY["n_test"], seed=19)
    return folder, attention_weights(model, squares_tensor(points)[:8, :2])  # {name: [8, H, 2, 2]}


def grid(dom):
    """The shown map as ``[[weight]]`` (rows: queries) and the labels of rows and columns."""
    cells = [c for c in dom.find("td") if "data-weight" in c[1]]
    rows = 1 + max(int(c[1]["data-row"]) for c in cells)
    weights = [[None] * (len(cells) // rows) for _ in range(rows)]
    for c in cells:
        weights[int(c[1]["data-row"])][int(c[1]["data-col"])] = float(c[1]["data-weight"])
    return weights, [e[2] for e in dom.find("th", scope="row")], [e[2] for e in dom.find("th", scope="col")]


def options(dom, select_id):
    """The (value, text, selected) of a menu's options."""
    inside, found = False, []
    for tag, attrs, text in dom.elements:
        if tag == "select":
            inside = attrs.get("id") == select_id
        elif tag == "option" and inside:
            found.append((attrs["value"], text, "selected" in attrs))
    return found


@pytest.mark.browser
@needs_chromium
def test_the_linked_cross_attention_head_shows_the_checkpoints_weights(pe_run, tmp_path):
    folder, expected = pe_run
    dom = dump_dom(folder / "report.html", "viewer=square:3,layer:decoder.cross,head:2,cell:2,1", tmp_path)
    assert dom.one("section", id="attn-viewer")[1].get("data-ready") == "true"  # the script ran to its end
    weights, rows, cols = grid(dom)
    want = expected["decoder.layer.cross_attn_heads"][2, 1]  # square 3, head 2: [T, S]
    assert weights == [[pytest.approx(w, abs=5e-5) for w in row] for row in want.tolist()]
    assert (rows, cols) == (["Point #3", "Point #4"], ["Point #1", "Point #2"])
    # Not what the page shows before its script (square 1, the encoder, head 1).
    assert not torch.allclose(want, expected["encoder.layer.self_attn_heads"][0, 0], atol=1e-4)
    caption = dom.one(id="attn-caption")[2]
    assert caption.startswith("Square 3 (") and "Cross-Attention (decoder.layer.cross_attn_heads) · head 2" in caption
    # Every square, layer and head is offered, the linked ones chosen.
    squares = options(dom, "attn-square")
    assert [s[0] for s in squares] == [str(i) for i in range(8)] and [s[2] for s in squares].index(True) == 2
    assert [(text, chosen) for _, text, chosen in options(dom, "attn-layer")] == [
        ("Encoder Self-Attention", False), ("Decoder Self-Attention", False), ("Cross-Attention", True)]
    assert [(text, chosen) for _, text, chosen in options(dom, "attn-head")] == [
        ("head 1", False), ("head 2", True), ("head 3", False)]
    # The hovered cell (query 2, key 1) is marked and read out.
    (hovered,) = [c for c in dom.find("td") if "data-weight" in c[1] and "attn-hover" in c[1].get("class", "")]
    assert (hovered[1]["data-row"], hovered[1]["data-col"]) == ("1", "0")
    readout = dom.one(id="attn-readout")[2]
    assert f"query Point #4 → key Point #1: weight {want[1, 0].item():.4f}" in readout


@pytest.mark.browser
@needs_chromium
def test_a_layer_named_by_module_and_values_out_of_range(pe_run, tmp_path):
    folder, expected = pe_run
    dom = dump_dom(folder / "report.html", "viewer=layer:decoder.layer.self_attn_heads,head:9,square:8", tmp_path)
    weights, rows, cols = grid(dom)
    want = expected["decoder.layer.self_attn_heads"][7, 0]  # square 8, head 1 (head 9 ignored)
    assert weights == [[pytest.approx(w, abs=5e-5) for w in row] for row in want.tolist()]
    assert (rows, cols) == (["Point #3", "Point #4"], ["Point #2", "Point #3"])
    note = dom.one(id="attn-note")
    assert "hidden" not in note[1] and note[2] == "Ignored in the link: head:9"


@pytest.mark.browser
@needs_chromium
def test_the_gru_attention_models_one_layer(tmp_path):
    folder = tmp_path / "gru-attn"
    train_run(SquaresConfig(model="gru-attn", **TINY), folder, progress=False)
    _, model, _ = load_run(folder)
    points, _ = generate_sequences(n=TINY["n_test"], seed=19)
    want = attention_weights(model, squares_tensor(points)[:8, :2])["decoder.attn"][4, 0]  # square 5: [T, S]
    dom = dump_dom(folder / "report.html", "viewer=square:5", tmp_path)
    weights, rows, cols = grid(dom)
    assert weights == [[pytest.approx(w, abs=5e-5) for w in row] for row in want.tolist()]
    assert [text for _, text, _ in options(dom, "attn-layer")] == ["Cross-Attention"]
    assert [text for _, text, _ in options(dom, "attn-head")] == ["head 1"]
