"""Tuning tables: the offline sweep of precisions, its Pareto front, and the YAML tables that
``precision="auto"`` reads (see docs/tuning.md)."""

from .pareto import pareto_front
from .table import SCHEMA_VERSION, TableError, load_table, save_table

__all__ = ["pareto_front", "SCHEMA_VERSION", "TableError", "load_table", "save_table"]
