"""Every attnlab figure: functions that take tensors or arrays and return a Figure.

Figures are built on :class:`matplotlib.figure.Figure`, not ``pyplot``: nothing is
shown, registered or restyled globally. In a notebook, display one by leaving it
as the cell's value; elsewhere, ``fig.savefig("name.png")``. Functions that draw a
single axes take ``ax=`` to draw into an existing figure.

* the positional-encoding lab (the book's dials and meshes):
  :func:`encoding_degrees`, :func:`exponential_dials`, :func:`encoding_heatmap`,
  :func:`plot_mesh`, :func:`plot_distances`;
* the TensorFlow position-encoding notebook (angles, similarity, shift):
  :func:`plot_angle_rates`, :func:`plot_angle_map`, :func:`plot_encoding`,
  :func:`plot_similarity`, :func:`plot_nearby`, :func:`plot_shifted`;
* the d2l chapter (columns, binary analogy, heatmap of P): :func:`plot_columns`,
  :func:`plot_binary`, :func:`plot_encoding`;
* the attention lab and the positional-encoding lab (attention):
  :func:`plot_attention_weights`, :func:`query_and_keys`, :func:`alignment_matrix`
  (the book's :func:`figure9`);
* the positional-encoding lab and the attention lab (training):
  :func:`plot_losses`, :func:`plot_sequence_pred`;
* variable-length squares (the next corners after 2, 3 or 4 given): :func:`prefix_pred`;
* recorded attention for bertviz's head and model views: :func:`to_bertviz`.

Plotting takes data and never runs a model. The book's figures that do, called
with a model or a trainer (``plot_attention(model, inputs, ...)``,
``sequence_pred(sbs, full_test, test_directions)``), are in
:mod:`attnlab.compat.chapter9`: they run the model and call the functions here.
"""

from attnlab.plotting.attention import alignment_matrix, figure9, query_and_keys
from attnlab.plotting.attention_maps import plot_attention_weights
from attnlab.plotting.bertviz_format import to_bertviz
from attnlab.plotting.dials import encoding_degrees, exponential_dials
from attnlab.plotting.encodings_nd import plot_axial_rotary, plot_encoding_2d
from attnlab.plotting.lengths import plot_length_generalisation
from attnlab.plotting.mesh import encoding_heatmap, plot_distances, plot_mesh
from attnlab.plotting.prefixes import prefix_pred
from attnlab.plotting.rates import plot_angle_map, plot_angle_rates
from attnlab.plotting.similarity import plot_nearby, plot_similarity
from attnlab.plotting.squares import plot_sequence_pred
from attnlab.plotting.tables import plot_binary, plot_columns, plot_encoding, plot_shifted
from attnlab.plotting.training import plot_losses

__all__ = [
    "plot_axial_rotary",
    "plot_encoding_2d",
    "alignment_matrix",
    "encoding_degrees",
    "encoding_heatmap",
    "exponential_dials",
    "figure9",
    "plot_angle_map",
    "plot_angle_rates",
    "plot_attention_weights",
    "plot_binary",
    "plot_columns",
    "plot_distances",
    "plot_encoding",
    "plot_length_generalisation",
    "plot_losses",
    "plot_mesh",
    "plot_nearby",
    "plot_shifted",
    "plot_similarity",
    "plot_sequence_pred",
    "prefix_pred",
    "query_and_keys",
    "to_bertviz",
]
