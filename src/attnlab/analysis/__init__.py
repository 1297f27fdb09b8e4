"""Analysis of positional encodings: similarity views (and, soon, the audit)."""

from attnlab.analysis.similarity import (
    as_table,
    binary_codes,
    cosine_similarity_matrix,
    distance_matrix,
    dot_products,
    means,
    norms,
    sse,
)

__all__ = [
    "as_table",
    "binary_codes",
    "cosine_similarity_matrix",
    "distance_matrix",
    "dot_products",
    "means",
    "norms",
    "sse",
]
