"""Analysis of positional encodings: the audit of the positional-encoding lab's requirements, similarity views."""

from attnlab.analysis.audit_report import AuditReport, PropertyCheck
from attnlab.analysis.position_audit import audit_position
from attnlab.analysis.properties import audit
from attnlab.analysis.similarity import (
    as_table,
    binary_codes,
    check_table,
    cosine_similarity_matrix,
    distance_matrix,
    dot_products,
    means,
    norms,
    sse,
)

__all__ = [
    "AuditReport",
    "PropertyCheck",
    "as_table",
    "audit",
    "audit_position",
    "binary_codes",
    "check_table",
    "cosine_similarity_matrix",
    "distance_matrix",
    "dot_products",
    "means",
    "norms",
    "sse",
]
